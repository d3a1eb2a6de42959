"""The timing worker's side of a cell's integrity: input sets, the kept outputs checked, one profiled call.

Outputs of the kept calls (:mod:`harness.bench.guard`) are compared with a float64 computation on the
very inputs those calls saw, by the pass rule of verify (:mod:`harness.tolerance`). A forward is
checked on :data:`CHECK_ROWS` query rows drawn at random (always the first and the last) with
:func:`harness.oracle.reference_rows`, at O(rows x Tk x d) whatever the size; all rows when the
case is small. Gradients (bwd, fwd+bwd) are checked in full against float64 autograd up to
:data:`GRAD_CHECK_PAIRS` attended pairs per cell, and not checked above (said in the record).
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from harness.bench.guard import CLOCK, DEFAULT_INPUT_SETS, ENTROPY, SETS_BYTES, InputSet, Kept
from harness.cases import AttentionCase
from harness.oracle import expand_kv, reference_attention, reference_rows, sample_rows
from harness.results import CheckedCall
from harness.tensors import TORCH_DTYPES, Inputs, _to_backend, backward_grads, make_inputs, to_float64
from harness.tolerance import GRAD_M, OUTPUT_M, baseline_attention, baseline_rows, compare

CHECK_ROWS = 16
FULL_ROWS_PAIRS = 1 << 20
"""Up to this many (B x H x Tq x Tk), every row is checked."""
GRAD_CHECK_PAIRS = 1 << 21
PROFILE_TOP = 3


def set_count(case: AttentionCase, warm_cache: bool) -> int:
    """How many input sets to rotate through: 1 for warm caches on purpose, else 3 (2 for huge inputs)."""
    if warm_cache:
        return 1
    item = TORCH_DTYPES[case.dtype].itemsize
    one = item * case.batch * (case.heads * case.tq * case.d + case.kv_heads * case.tk * (case.d + case.value_dim))
    return DEFAULT_INPUT_SETS if one * DEFAULT_INPUT_SETS <= SETS_BYTES else 2


def draw_sets(case: AttentionCase, count: int, backend: str) -> list[Inputs]:
    """``count`` input sets of the case: the first drawn (seed 0, as bench always drew), the others made
    from it by ``x -> (-1)^s x + s/4`` on q, k and v (the page pools alike, so paged and contiguous keys
    agree), in the same memory layout: distinct storage and values at the cost of a copy, not a draw."""
    first = make_inputs(case, 0, backend)
    first.q64 = first.k64 = first.v64 = None  # type: ignore[assignment]  # the checks read the live arrays
    sets = [first]
    for s in range(1, count):
        other = copy.copy(first)
        made: dict[int, Any] = {}
        for name in ("q", "k", "v", "k_pages", "v_pages"):
            x = getattr(first, name)
            if x is not None and id(x) not in made:  # self-attention: q, k and v are one array, and stay one
                made[id(x)] = _variant(x, s, backend, None if name.endswith("pages") else case.layout)
            setattr(other, name, None if x is None else made[id(x)])
        sets.append(other)
    return sets


def _variant(x: Any, s: int, backend: str, layout: str | None) -> Any:
    """``(-1)^s x + s/4``, laid out as ``layout`` (None: contiguous, as page pools are)."""
    t = x if isinstance(x, torch.Tensor) else torch.from_numpy(x)
    y = t * (-1.0) ** s + s / 4.0
    if layout is not None:
        return _to_backend(y, backend, layout)
    return y if isinstance(x, torch.Tensor) else y.numpy()


def build_set(impl: Any, case: AttentionCase, mode: str, inputs: Inputs, seed: int, shift: bool) -> InputSet:
    """The call prepared on ``inputs`` (set-up here, never timed).

    fwd: the implementation's prepared closure. bwd: the forward runs once here and the call computes
    the input gradients from its retained graph (q cannot change under it: not shifted). fwd+bwd: both.
    """
    kwargs = inputs.kwargs(case, impl.structures)
    arrays = inputs.arrays(impl.structures)
    named = [("q", arrays[0]), ("k", arrays[1]), ("v", arrays[2]), *((k, v) for k, v in kwargs.items()
                                                                      if hasattr(v, "shape"))]
    if mode == "fwd":
        live = arrays[0] if shift else None
        return _printed(InputSet(impl.prepare(*arrays, **kwargs), named, inputs, live, _clone(live)))
    q, k, v = (x.detach().requires_grad_(True) for x in arrays)
    forward = impl.prepare(q, k, v, **kwargs)
    gen = torch.Generator().manual_seed(seed + 1)
    out = forward()
    grad_out = torch.randn(out.shape, generator=gen, dtype=torch.float32).to(out.dtype).to(out.device)
    named = [("q", q), ("k", k), ("v", v), ("grad_out", grad_out), *named[3:]]
    if mode == "bwd":
        return _printed(InputSet(lambda: backward_grads(out, (q, k, v), grad_out, retain_graph=True), named,
                                 inputs, leaves=(q, k, v), grad_out=grad_out))
    if mode == "fwd+bwd":
        live = q if shift else None
        return _printed(InputSet(lambda: backward_grads(forward(), (q, k, v), grad_out), named, inputs, live,
                                 _clone(live), leaves=(q, k, v), grad_out=grad_out))
    raise ValueError(f"unknown mode {mode!r}")


def _buffer_digest(x: Any) -> bytes | None:
    """A digest of every byte of the buffer behind ``x`` (its neighbours in a strided view too), read in
    place: no copy of the inputs is kept. None for what cannot be read from the host (a CUDA tensor)."""
    if isinstance(x, torch.Tensor):
        if x.device.type != "cpu" or x.is_meta:
            return None
        whole = torch.empty(0, dtype=torch.uint8).set_(x.untyped_storage())
        data: bytes | memoryview = whole.numpy().data if whole.numel() else b""
    elif isinstance(x, np.ndarray):
        root = x
        while isinstance(root.base, np.ndarray):
            root = root.base
        data = np.ascontiguousarray(root).view(np.uint8).reshape(-1).data if root.size else b""
    else:
        return None
    return hashlib.blake2b(data, digest_size=16).digest()


def _printed(s: InputSet) -> InputSet:
    """``s`` with a digest of each input it hands the call (the shifted q excepted: it changes before every call)."""
    s.prints = {}
    for name, x in s.named:
        if x is s.live_q:
            continue
        digest = _buffer_digest(x)
        if digest is not None:
            s.prints[name] = digest
    return s


def input_problems(sets: list[InputSet]) -> list[str]:
    """A sentence per input set whose inputs the timed calls wrote into (verify fails the same call)."""
    problems = []
    for index, s in enumerate(sets):
        named = dict(s.named)
        changed = [name for name, digest in (s.prints or {}).items() if _buffer_digest(named[name]) != digest]
        if changed:
            problems.append(f"input set {index}: the timed calls wrote into the input(s) {', '.join(changed)} "
                            "(or the buffer behind them): a call may read its inputs, never write them")
    return problems


def _clone(x: Any) -> Any:
    if x is None:
        return None
    return x.detach().clone() if isinstance(x, torch.Tensor) else x.copy()


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """The harness's own small tensor work single-threaded: on a busy machine an OpenMP region stalls on
    a descheduled thread, and these operations are too small to gain from more."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


@dataclass(frozen=True)
class OutputChecks:
    """The kept calls' outputs against float64: the problems found, and one record per call checked."""

    problems: list[str]
    checked: list[CheckedCall]


def check_kept(kept: list[Kept], sets: list[InputSet], case: AttentionCase, mode: str) -> OutputChecks:
    """Each kept call's output against float64 on its own inputs: the problems found and what was checked."""
    with one_thread():
        return _check_kept(kept, sets, case, mode)


def _check_kept(kept: list[Kept], sets: list[InputSet], case: AttentionCase, mode: str) -> OutputChecks:
    gen = torch.Generator().manual_seed(ENTROPY.getrandbits(63))  # rows the plugin cannot predict
    problems: list[str] = []
    checked: list[CheckedCall] = []
    keys: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
    for k in kept:
        if k.problem or k.out is None:  # a violation (reported as such): nothing of its own to compare
            continue
        s = sets[k.set_index]
        wrong_dtype = [d for d in k.dtypes if d not in ("none", case.dtype)]
        if wrong_dtype:  # as verify fails it: the float64 copy below would hide it
            problems.append(f"timed sample {k.index} (input set {k.set_index}): output dtype {wrong_dtype[0]}, "
                            f"expected {case.dtype} (q's dtype)")
            continue
        q = k.q if k.q is not None else to_float64(s.named[0][1])
        if mode == "fwd":
            if case.self_attention:
                kv = (q, q)
            else:
                kv = keys.get(k.set_index) or (to_float64(s.inputs.k), to_float64(s.inputs.v))
                keys[k.set_index] = kv
            verdict, rows = _check_forward(k.out, q, *kv, s, case, gen)
            where = f"rows {rows}"
        elif case.batch * case.heads * case.tq * case.tk <= GRAD_CHECK_PAIRS:
            verdict, where = _check_grads(k.out, q, s, case), "all rows"
        else:
            checked.append(CheckedCall(sample=k.index, set=k.set_index, checked="not checked (gradients of a case "
                                       f"above {GRAD_CHECK_PAIRS} pairs)"))
            continue
        checked.append(CheckedCall(sample=k.index, set=k.set_index, rows=where, max_abs_err=verdict.metrics.get("max_abs_err"),
                                   bound=verdict.metrics.get("bound")))
        if not verdict.ok:
            problems.append(f"timed sample {k.index} (input set {k.set_index}), {where}: {verdict.reason}")
    return OutputChecks(problems, checked)


def _check_forward(out: Any, q: torch.Tensor, k64: torch.Tensor, v64: torch.Tensor, s: InputSet, case: AttentionCase,
                   gen: torch.Generator) -> tuple[Any, list[Any]]:
    okw = s.inputs.oracle_kwargs(case)
    big = case.batch * case.heads * case.tq * case.tk > FULL_ROWS_PAIRS
    rows = sample_rows(case.tq, CHECK_ROWS if big else case.tq, gen)
    want = reference_rows(q, k64, v64, rows, **okw)
    dt = TORCH_DTYPES[case.dtype]
    bias = None if okw["bias"] is None else okw["bias"].to(dt)
    sinks = None if okw["sinks"] is None else okw["sinks"].to(dt)
    base, logits = baseline_rows(q.to(dt), k64.to(dt), v64.to(dt), rows, causal=case.causal, mask=okw["mask"],
                                 scale=case.scale, bias=bias, sinks=sinks, softcap=case.softcap,
                                 **case.structure_kwargs())
    got = out[:, :, rows] if out is not None and out.dim() == 4 else out
    shown = rows.tolist() if len(rows) <= 8 else rows.tolist()[:4] + ["..."] + rows.tolist()[-2:]
    return compare(got, want, to_float64(base), dtype=case.dtype, m=OUTPUT_M, logit_max=logits), shown


def _check_grads(out: Any, q: torch.Tensor, s: InputSet, case: AttentionCase) -> Any:
    okw = s.inputs.oracle_kwargs(case)
    leaves = s.leaves
    assert leaves is not None  # a backward's input set keeps its leaves
    k64, v64 = (q, q) if case.self_attention else (to_float64(leaves[1]), to_float64(leaves[2]))
    dout = to_float64(s.grad_out)
    want_leaves = [x.detach().clone().requires_grad_(True) for x in (q, k64, v64)]
    want = torch.autograd.grad(reference_attention(*want_leaves, **okw), want_leaves, dout)
    dt = TORCH_DTYPES[case.dtype]
    base_leaves = [x.detach().to(dt).requires_grad_(True) for x in (q, k64, v64)]
    bias = None if okw["bias"] is None else okw["bias"].to(dt)
    sinks = None if okw["sinks"] is None else okw["sinks"].to(dt)
    base_out = baseline_attention(*base_leaves, causal=case.causal, mask=okw["mask"], scale=case.scale, bias=bias,
                                  sinks=sinks, softcap=case.softcap, **case.structure_kwargs())
    base = torch.autograd.grad(base_out, base_leaves, dout.to(dt))
    scale = case.d ** -0.5 if case.scale is None else case.scale
    cancelled = abs(scale) * float((dout @ expand_kv(v64, case.heads).transpose(-1, -2)).abs().max()) \
        * max(float(q.abs().max()), float(k64.abs().max()))
    magnitude = max(float(w.abs().max()) for w in want)
    for name, g, w, b in zip(("dq", "dk", "dv"), out, want, base):
        verdict = compare(g, w, to_float64(b), dtype=case.dtype, m=GRAD_M, what=name,
                          magnitude=magnitude if name == "dv" else max(magnitude, cancelled))
        if not verdict.ok:
            return verdict
    return verdict


def profile_call(call: Any) -> list[list[Any]]:
    """One call under torch.profiler: the top ATen operators by their self time as a share of the call's
    wall time, [[name, share], ...]. Work outside ATen (a C++ extension's own loops, NumPy) shows as no
    operator: a "custom kernel" that delegates to SDPA shows as 90% in SDPA's operator."""
    # the autograd profiler without Kineto: the same ATen events, ready in milliseconds, where Kineto's
    # first use in a process takes seconds
    with torch.autograd.profiler.profile(use_kineto=False) as prof:
        started = CLOCK()
        out = call()
        wall_us = (CLOCK() - started) * 1e6
    del out
    events = [e for e in prof.key_averages() if e.self_cpu_time_total > 0 and e.key.startswith("aten::")]
    top = sorted(events, key=lambda e: -e.self_cpu_time_total)[:PROFILE_TOP]
    return [[e.key, round(min(1.0, e.self_cpu_time_total / wall_us), 4)] for e in top if wall_us > 0]
