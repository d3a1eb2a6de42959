"""Bench cells of module implementations (``kind="module"``): the plan's kernel calls as whole layers.

A module is timed on the layer that makes each planned kernel call: a self-attention case (B, H, T, d)
becomes multi-head attention over X (B, T, H d) with its projections (``layer`` the first the module
declares); a decode step (Tq new queries over Tk cached keys) becomes the same layer continuing from a
KV cache of Tk - Tq positions (the module contract's ``past_key``/``past_value``), the cache lengths
made equal (a module's cache has one length). A call no module case expresses (a window, packed
sequences, an explicit mask, a backward pass: module cases are forward only) has no module cell. The
softmax scale does not change a call's cost, so a model's own scale is not carried.

FLOPs are the layer's (:meth:`harness.modules.ModuleCase.own_flops`: projections, attention and an
encoder's feed-forward), so GFLOP/s compare across kernels and modules. Module cells are timed by
:func:`module_timing_task`: the module's set-up (``prepare``) outside the timed calls, the same clock and
sample rule as kernels, without the kernels' input rotation. Where kernel cells check their outputs (the default;
not ``config.checks`` off), a module cell's output after its timed calls is held against the layer in float64
(:func:`module_output_problems`: its shape, NaN/Inf, the values within verify's module bound), and a cell whose
output is wrong is ``wrong``, as a kernel's, never ``ok``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from harness.bench.sweeps import PlannedCell
from harness.bench.timing import TimingConfig, pin_threads, time_call
from harness.bench.verdicts import Timed
from harness.case.attention import AttentionCase
from harness.contract.registry import Implementation
from harness.modules.cases import ModuleCase, module_layers
from harness.results import Memory


def module_case_for(case: AttentionCase, layer: str) -> ModuleCase | None:
    """The module call that makes ``case``'s attention, or None when no module case expresses it."""
    decode = case.tq < case.tk and (not case.causal or case.causal_align == "bottom_right")
    plain = case.window is None and case.varlen is None and case.page_size is None and case.mask == "none"
    if not plain or case.bias != "none" or case.kv_dtype is not None or case.extra_structures:
        return None
    if not decode and case.tq != case.tk:
        return None
    past = case.tk - case.tq if decode else 0
    if (past or case.kv_heads != case.heads) and layer != "mha":
        return None
    return ModuleCase(batch=case.batch, seq=case.tq, d_model=case.heads * case.d, heads=case.heads,
                      kv_heads=case.kv_heads, past=past, causal=case.causal or bool(past), layer=layer,
                      dtype=case.dtype, device=case.device)


def module_cells(cells: Iterable[PlannedCell], impls: Mapping[str, Implementation]) -> list[PlannedCell]:
    """``cells`` with each module implementation's kernel cells replaced by its module cells (deduplicated)."""
    out: list[PlannedCell] = []
    seen: set[tuple[str, str]] = set()
    for cell in cells:
        impl = impls.get(cell.implementation)
        if impl is None or impl.declared.kind != "module" or not isinstance(cell.case, AttentionCase):
            out.append(cell)
            continue
        module_case = module_case_for(cell.case, module_layers(impl)[0]) if cell.mode == "fwd" else None
        if module_case is not None and (cell.implementation, module_case.id) not in seen:
            seen.add((cell.implementation, module_case.id))
            out.append(PlannedCell(cell.implementation, module_case, cell.mode))  # type: ignore[arg-type]
    return out


def _module_call(impl: Implementation, case: ModuleCase, seed: int = 0) -> Any:
    from harness.modules.cases import module_positional_biases
    from harness.modules.weights import make_module_inputs

    inputs = make_module_inputs(case, seed, impl.declared.backend)
    return impl.prepare(inputs.x, **inputs.kwargs(case, module_positional_biases(impl)))


def module_output_problems(case: ModuleCase, inputs: Any, out: Any) -> tuple[str, ...]:
    """What is wrong with a module's output ``out`` on ``inputs``, against the layer in float64 with verify's
    module bound (:func:`harness.reference.tolerance.compare`: the shape, NaN/Inf, the values); empty when right."""
    from harness.modules.reference import baseline_output, reference_output, weighted_logit
    from harness.reference.tensors import dtype_name, to_float64
    from harness.reference.tolerance import OUTPUT_M, compare

    try:
        got_dtype = dtype_name(out)
        if got_dtype != case.dtype:
            return (f"the module returned {got_dtype}, expected the input dtype {case.dtype}",)
        verdict = compare(to_float64(out), reference_output(case, inputs), baseline_output(case, inputs),
                          dtype=case.dtype, m=OUTPUT_M, logit_max=weighted_logit(case, inputs))
    except Exception as exc:  # noqa: BLE001 - an output that cannot be read is the finding
        return (f"the module's output could not be checked: {type(exc).__name__}: {exc}",)
    return () if verdict.ok else (f"the module's output after its timed calls: {verdict.reason}",)


def module_timing_task(impl: Implementation, case: dict[str, object], config: TimingConfig,
                       threads: int | None) -> Timed:
    """Worker: time one module cell (set-up outside the timed calls); then, where kernel cells are checked, check one
    more call's output against float64 (:func:`module_output_problems`)."""
    from harness.bench import guard
    from harness.modules.cases import module_positional_biases
    from harness.modules.weights import make_module_inputs
    from harness.results.evidence import Integrity

    used = pin_threads(threads)
    module_case = ModuleCase.from_dict(case)
    started = guard.CLOCK()
    inputs = make_module_inputs(module_case, 0, impl.declared.backend)
    call = impl.prepare(inputs.x, **inputs.kwargs(module_case, module_positional_biases(impl)))
    setup_s = guard.CLOCK() - started
    samples = tuple(time_call(call, module_case.device, config))
    problems = module_output_problems(module_case, inputs, call()) if config.checks else ()
    return Timed(samples_s=samples, threads=used, setup_s=setup_s,
                 integrity=Integrity(output_problems=problems) if problems else None)


def module_memory_task(impl: Implementation, case: dict[str, object], threads: int | None) -> Memory:
    """Worker (the memory one): peak extra bytes of a module's cell (its set-up and calls)."""
    from harness.bench.memory import measure, prepare_process
    from harness.modules.cases import module_positional_biases
    from harness.modules.weights import make_module_inputs

    prepare_process()
    pin_threads(threads)
    module_case = ModuleCase.from_dict(case)
    inputs = make_module_inputs(module_case, 0, impl.declared.backend)  # the inputs and weights: before the measure
    kwargs = inputs.kwargs(module_case, module_positional_biases(impl))
    return measure(lambda: (impl.prepare(inputs.x, **kwargs), 0), impl.declared.backend, module_case.device)
