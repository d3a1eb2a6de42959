"""The bench's worker tasks: what runs in a timing, memory or peak worker, never in the parent.

Each task is sent to its worker by reference (:mod:`harness.runtime.isolation` pickles the function by its
module and name), so importing this module is the first thing a worker does for the bench: it imports
:mod:`harness.bench.guard` and :mod:`harness.bench.loop`, which bind the clocks and watch the loop's
functions before any plugin's source is imported, and :mod:`harness.bench.audit`, so that a fresh worker's
warm-up (:func:`warm_up_task`) pays that import, not the first timed task before its clock starts (a gap the
parent's wall clock would read as a slowed worker clock). The parent only submits these tasks
(:mod:`harness.bench.cell_timing`, :mod:`harness.bench.roof_readings`, :mod:`harness.bench.distributed`)
and reads the typed records they send back.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from harness.bench import audit, guard  # guard binds the clocks: imported by a worker before any plugin is
from harness.bench.bandwidth import BANDWIDTH_TIMING, measure_bandwidth
from harness.bench.loop import cuda_loop, timed_loop
from harness.bench.module_cells import module_memory_task, module_timing_task
from harness.bench.peak import PEAK_TIMING, measure_gemm_peak
from harness.bench.timing import TimingConfig, freeze_imports, pin_threads, roof_share, roof_timing, time_call
from harness.bench.verdicts import Timed
from harness.case.attention import AttentionCase
from harness.contract.discovery import load_implementation
from harness.results import Accounting, Bandwidth, Integrity, Memory, Peak


def clock_for(timing: TimingConfig, device: str) -> str:
    """The clock a cell of ``device`` is timed, stamped and has its roofs read on: the cells' own (a GPU's: always
    the wall clock)."""
    return timing.clock if device == "cpu" else "wall"


def _implementation(name: str, source: str) -> Any:
    """Implementation ``name`` from the one source that declares it: no other plugin is imported here."""
    return load_implementation(source, name)


def build_call(impl: Any, case: AttentionCase, mode: str, seed: int = 0) -> Callable[[], Any]:
    """The zero-argument call to time, with every bit of set-up (inputs, layout, graph) done here
    (:func:`harness.bench.audit.build_set` describes each mode)."""
    from harness.bench.audit import build_set
    from harness.reference.tensors import make_inputs

    return build_set(impl, case, mode, make_inputs(case, seed, impl.declared.backend), seed, shift=False).call


def warm_up_task(name: str, source: str) -> None:
    """Worker: load the implementation's source (its import may build a C++ extension, on a cluster node for the
    first time) before any cell's time limit runs."""
    _implementation(name, source)
    freeze_imports()  # each round's collection then scans the cells' objects, not torch's


def serve_task(name: str, source: str, case: dict[str, object], mode: str, config: TimingConfig,
               threads: int | None, driver: tuple[str, bytes], key: str | None = None) -> Timed:
    """Worker: serve one cell's calls as the parent drives them (:mod:`harness.bench.driven`): its input sets
    built once (the arrays redrawn every call in shared memory), then, in each task, the calls the parent asks
    for. ``key`` names a cell timed in rounds, whose sets are kept between its rounds' tasks until the parent
    says it is done. The parent measures; this sends back only the set-up's time, the profile, and the inputs the
    calls wrote that are not redrawn."""
    from harness.bench import driven

    used = pin_threads(threads)
    started = guard.CLOCK()
    open_cell = _SERVED.get(key) if key is not None else None
    if open_cell is None:
        impl = _implementation(name, source)
        attention_case = AttentionCase.from_dict(case)
        shift = audit.fresh_each_call(config.warm_cache, mode)
        with audit.one_thread():
            drawn = audit.draw_sets(attention_case, audit.set_count(attention_case, config.warm_cache), impl.declared.backend)
        shared: list[driven.SharedInputs] = []
        sets = [audit.build_set(impl, attention_case, mode, inputs, seed, shift, shared)
                for seed, inputs in enumerate(drawn)]
        setup_s = guard.CLOCK() - started
        open_cell = [driven.Server([s.call for s in sets], shared), sets, impl.declared.backend, None, setup_s]
        if key is not None:
            _SERVED[key] = open_cell
    server, sets, backend, _, setup_s = open_cell
    try:
        with driven.connect(driver) as sock:
            server.hello(sock)
            profiled, final = server.serve(sock, audit.profile_call if backend == "torch" else None)
            open_cell[3] = open_cell[3] if profiled is None else profiled
    except BaseException:
        if key is not None:
            _SERVED.pop(key, None)
        raise
    if key is not None and not final:
        return Timed(threads=used, setup_s=setup_s)
    _SERVED.pop(key or "", None)
    # what the worker itself saw, a second opinion only (it runs where the plugin does): inputs that are not
    # redrawn written into, and torch's thread count moved off the bench's pin
    problems = tuple(audit.input_problems(sets))
    if threads is not None and torch.get_num_threads() != used:
        problems += (f"torch's thread count ({used} -> {torch.get_num_threads()}) changed by a call and left so",)
    profile = open_cell[3]
    return Timed(threads=used, setup_s=setup_s, integrity=Integrity(kept_problems=problems),
                 profile=None if profile is None else tuple((str(n), float(s)) for n, s in profile))


_SERVED: dict[str, Any] = {}
"""Cells timed in rounds whose sets this worker keeps until their last round."""


def timing_task(name: str, source: str, case: dict[str, object], mode: str,
                config: TimingConfig, threads: int | None) -> Timed:
    """Worker: time one cell; raw samples, the thread count in force, and what backs the time
    (docs/integrity.md): input sets rotated, kept calls checked, one call profiled, the clock's accounting."""
    entered = guard.CLOCK()
    if case.get("kind") == "module":
        return module_timing_task(_implementation(name, source), case, config, threads)
    used = pin_threads(threads)
    impl = _implementation(name, source)
    attention_case = AttentionCase.from_dict(case)
    started = guard.CLOCK()
    if not config.checks:
        call = build_call(impl, attention_case, mode)
        setup_s = guard.CLOCK() - started
        return Timed(samples_s=tuple(time_call(call, attention_case.device, config)), threads=used, setup_s=setup_s)
    shift = audit.fresh_each_call(config.warm_cache, mode)
    with audit.one_thread():
        drawn = audit.draw_sets(attention_case, audit.set_count(attention_case, config.warm_cache), impl.declared.backend)
    sets = [audit.build_set(impl, attention_case, mode, inputs, seed, shift) for seed, inputs in enumerate(drawn)]
    setup_s = guard.CLOCK() - started  # inputs and the implementation's set-up (a compile, say)
    looped = guard.CLOCK()
    if attention_case.device == "cuda":  # docs/integrity.md: which checks a CUDA cell gets
        loop = cuda_loop(sets, config, impl.declared.backend)
    else:  # a cell timed whole on a cluster's node: the worker's loop, held against the node's wall time
        loop = timed_loop(sets, config, impl.declared.backend, audit.profile_call if impl.declared.backend == "torch" else None,
                          sample_clock=guard.CPU_CLOCK if config.clock == "cpu" else None)
    loop_total = guard.CLOCK() - looped
    checked = guard.CLOCK()
    outputs = audit.check_kept(loop.kept, sets, attention_case, mode)
    written = tuple(audit.input_problems(sets))  # a call that writes into its inputs: a violation, as in verify
    profile = loop.profile
    spin = guard.spin_baseline() if loop.kept else 0.0
    checks_s = guard.CLOCK() - checked
    total = guard.CLOCK() - entered
    integrity = Integrity(
        input_sets=len(sets), shifted=shift, clock=guard.clock_problem(), untyped=tuple(loop.untyped),
        kept_problems=tuple(f"timed sample {k.index} (input set {k.set_index}): {k.problem}" for k in loop.kept if k.problem)
        + written,
        output_problems=tuple(outputs.problems), checked=tuple(outputs.checked),
        cpu_after_s=tuple(k.cpu_after_s for k in loop.kept if k.cpu_after_s is not None), spin_s=spin,
        accounting=Accounting(total_s=total, loop_s=loop.loop_s, captures_s=loop.captures_s,
                              phases_s=(started - entered) + setup_s + loop_total + checks_s, checks_s=checks_s),
    )
    return Timed(samples_s=tuple(loop.samples), threads=used, setup_s=setup_s, integrity=integrity,
                 profile=None if profile is None else tuple((str(n), float(s)) for n, s in profile))


def memory_task(name: str, source: str, case: dict[str, object], mode: str,
                threads: int | None) -> Memory:
    """Worker (the memory one): peak extra bytes of the cell: its set-up and two calls, above its inputs
    (:mod:`harness.bench.memory`)."""
    from harness.bench.memory import measure, prepare_process, warm_process

    if case.get("kind") == "module":
        return module_memory_task(_implementation(name, source), case, threads)
    prepare_process()
    pin_threads(threads)
    impl = _implementation(name, source)
    attention_case = AttentionCase.from_dict(case)
    warm_process(attention_case.dtype, attention_case.device)
    _warm_cell(impl, attention_case, mode)
    return measure(_set_up(impl, attention_case, mode), impl.declared.backend, attention_case.device)


WARM_T = 16
"""The sequence length of the unmeasured cell a memory measure makes first (:func:`_warm_cell`)."""


def _warm_cell(impl: Any, case: AttentionCase, mode: str) -> None:
    """The implementation set up and called once on a small case like ``case`` (T at most :data:`WARM_T`), not
    measured: its one-time allocations (an extension it loads, a JIT's first compile, per-thread scratch) are then
    the baseline, while whatever it sizes by the case's shape is allocated in the measured span. Where the small case
    is not one this case can shrink to, or the call fails there, the measure goes on without it."""
    from harness.bench.memory import release_memory

    try:
        small = case.with_(tq=min(case.tq, WARM_T), tk=min(case.tk, WARM_T))
        call, _ = _set_up(impl, small, mode)()
        out = call()
        del call, out
    except Exception:  # noqa: BLE001 - an unmeasured warm-up: the cell's own measure says what fails
        pass
    release_memory()


def traced_memory_task(name: str, source: str, case: dict[str, object], mode: str, threads: int | None) -> Memory:
    """Worker (the implementation's timing one): peak extra bytes of the cell of a NumPy kernel on the CPU, by
    tracemalloc, which reads the arrays' own allocations whatever the allocator does: it needs none of the memory
    worker's set-up, so a NumPy implementation is measured where it is timed, after its timed calls, and no process
    is started for it. tracemalloc is stopped when the measure ends: the timed calls after it run untraced."""
    from harness.bench.memory import measure_numpy

    pin_threads(threads)
    impl = _implementation(name, source)
    return measure_numpy(_set_up(impl, AttentionCase.from_dict(case), mode))


def _set_up(impl: Any, case: AttentionCase, mode: str) -> Callable[[], tuple[Callable[[], Any], int]]:
    """The cell's set-up for a memory measure, its inputs drawn now (before the measure starts): the call, and the
    bytes of the arrays the harness made in set-up (a backward's upstream gradient)."""
    from harness.bench.audit import build_set
    from harness.bench.memory import output_bytes
    from harness.reference.tensors import make_inputs

    inputs = make_inputs(case, 0, impl.declared.backend)

    def set_up() -> tuple[Callable[[], Any], int]:
        built = build_set(impl, case, mode, inputs, 0, shift=False)
        return built.call, output_bytes(built.grad_out) if built.grad_out is not None else 0
    return set_up


def traced_in_timing_worker(backend: str, case: AttentionCase) -> bool:
    """Whether a cell's memory is measured in its timing worker (:func:`traced_memory_task`): a NumPy kernel on the
    CPU. Others need the memory worker's allocator set-up (torch's CPU bytes are read from the RSS)."""
    return backend == "numpy" and case.device == "cpu" and case.kind == "kernel"


def peak_task(dtype: str, device: str, threads: int | None, clock: str = "wall", budget_s: float | None = None) -> Peak:
    """Worker (the peak one): the GEMM peak, its calls timed on the cells' clock (a roof read on the wall clock
    under load would sit below cells timed on CPU time), for ``budget_s`` (None: :data:`PEAK_TIMING`'s)."""
    freeze_imports()  # each timed call's collection then scans the roof's objects, not torch's (0.1 s of CPU each)
    return measure_gemm_peak(dtype, device, roof_timing(PEAK_TIMING, clock, budget_s), threads=threads,
                             share=roof_share(PEAK_TIMING, device, budget_s))


def bandwidth_task(device: str, threads: int | None, clock: str = "wall", budget_s: float | None = None) -> Bandwidth:
    """Worker (the peak one): the read and copy bandwidth, timed on the cells' clock, each for ``budget_s``
    (None: :data:`BANDWIDTH_TIMING`'s)."""
    freeze_imports()
    return measure_bandwidth(device, roof_timing(BANDWIDTH_TIMING, clock, budget_s), threads=threads,
                             share=roof_share(BANDWIDTH_TIMING, device, budget_s))
