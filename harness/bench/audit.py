"""The timing worker's side of a cell's integrity: input sets, the chosen calls checked, one profiled call.

The fingerprints of the calls drawn after the loop (:mod:`harness.bench.fingerprint`) are compared with
a float64 computation on the very inputs those calls saw (regenerated from their seeds,
:mod:`harness.bench.fresh`), projected on the same random vectors, against the pass rule of verify
(:mod:`harness.reference.tolerance`) carried through the projection. A forward is checked on :data:`CHECK_ROWS`
query rows drawn at random (always the first and the last) with :func:`harness.reference.oracle.reference_rows`,
at O(rows x Tk x d) whatever the size; all rows when the case is small. Gradients (bwd, fwd+bwd) are
checked in full against float64 autograd up to :data:`GRAD_CHECK_PAIRS` attended pairs per cell, and
not checked above (said in the record).

One module: the forward and the gradient checks share the regeneration of a call's inputs and
the rule's bound carried through the projection; split, each would derive them again.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from harness.bench import state
from harness.bench.driven import SharedInputs, share_arrays
from harness.bench.fingerprint import Print, projected_error
from harness.bench.fresh import fresh_for
from harness.bench.guard import CLOCK, DEFAULT_INPUT_SETS, ENTROPY, SETS_BYTES, InputSet
from harness.case.attention import AttentionCase
from harness.reference.oracle import grouped_matmul, reference_attention, reference_rows, sample_rows
from harness.reference.quantize import dequantize
from harness.reference.tensors import TORCH_DTYPES, Inputs, _to_backend, backward_grads, make_inputs, to_float64
from harness.reference.tolerance import GRAD_M, OUTPUT_M, baseline_attention, baseline_rows, floor_for
from harness.results import CheckedCall

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


def fresh_each_call(warm_cache: bool, mode: str) -> bool:
    """Whether a cell's q, k and v get new values before every call: always, but for the warm-cache case (on
    purpose) and a backward alone (its graph is built once, on fixed leaves). An implementation with its own
    set-up (``prepare=True``) too: set-up sees the shapes and a first set of values, and every call's values are
    new, written into the same arrays, so nothing computed in set-up can stand in for a call's work."""
    return not warm_cache and mode != "bwd"


def draw_sets(case: AttentionCase, count: int, backend: str) -> list[Inputs]:
    """``count`` input sets of the case: the first drawn (seed 0, as bench always drew), the others made
    from it by ``x -> (-1)^s x + s/4`` on q, k and v (the page pools alike, so paged and contiguous keys
    agree), in the same memory layout: distinct storage and values at the cost of a copy, not a draw. An FP8
    cache has no arithmetic in torch and takes ``(-1)^s x`` alone (its sign bit flipped), its scales as they are."""
    first = make_inputs(case, 0, backend, float64=False)  # the checks read the live arrays
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
    """``(-1)^s x + s/4``, laid out as ``layout`` (None: contiguous, as page pools are); an FP8 array ``(-1)^s x``
    (exact: the sign bit), a copy of its own."""
    t = x if isinstance(x, torch.Tensor) else torch.from_numpy(x)
    if t.dtype.is_floating_point and t.element_size() == 1:
        y = t.contiguous().view(torch.uint8).bitwise_xor(0x80 * (s % 2)).view(t.dtype)
    else:
        y = t * (-1.0) ** s + s / 4.0
    if layout is not None:
        return _to_backend(y, backend, layout)
    return y if isinstance(x, torch.Tensor) else y.numpy()


_INDEX = {"q": 0, "k": 1, "v": 2}


def build_set(impl: Any, case: AttentionCase, mode: str, inputs: Inputs, seed: int, shift: bool,
              shared: list[SharedInputs] | None = None) -> InputSet:
    """The call prepared on ``inputs`` (set-up here, never timed).

    fwd: the implementation's prepared closure. bwd: the forward runs once here and the call computes
    the input gradients from its retained graph (q cannot change under it: not shifted). fwd+bwd: both.
    With ``shared`` (a cell whose calls the parent drives, :mod:`harness.bench.driven`), the arrays redrawn before
    every call are copied into shared memory before the implementation's set-up sees them, and the record of
    those copies is appended to ``shared``: the parent writes each call's values there (the set redraws nothing
    itself).
    """
    kwargs = inputs.kwargs(case, impl.declared.structures)
    arrays = inputs.arrays(impl.declared.structures)
    named = [("q", arrays[0]), ("k", arrays[1]), ("v", arrays[2]), *((k, v) for k, v in kwargs.items()
                                                                      if hasattr(v, "shape"))]
    shared_names: tuple[str, ...] = ()
    if shared is not None:
        fresh = fresh_for(named, inputs) if shift else None
        laid, record = share_arrays(list(arrays), fresh.names if fresh is not None else ())
        shared.append(record)
        arrays, shared_names, shift = (laid[0], laid[1], laid[2]), record.names, False
        named = [("q", arrays[0]), ("k", arrays[1]), ("v", arrays[2]), *named[3:]]
    if mode == "fwd":
        fresh = fresh_for(named, inputs) if shift else None
        built = InputSet(impl.prepare(*arrays, **kwargs), named, inputs, fresh)
        built.redrawn = tuple(arrays[_INDEX[n]] for n in shared_names)
        return _printed(built)
    q, k, v = (x.detach().requires_grad_(True) for x in arrays)
    forward = impl.prepare(q, k, v, **kwargs)
    gen = torch.Generator().manual_seed(seed + 1)
    out = forward()
    grad_out = torch.randn(out.shape, generator=gen, dtype=torch.float32).to(out.dtype).to(out.device)
    named = [("q", q), ("k", k), ("v", v), ("grad_out", grad_out), *named[3:]]
    redrawn = tuple((q, k, v)[_INDEX[n]] for n in shared_names)
    if mode == "bwd":
        return _printed(InputSet(lambda: backward_grads(out, (q, k, v), grad_out, retain_graph=True), named,
                                 inputs, leaves=(q, k, v), grad_out=grad_out, redrawn=redrawn))
    if mode == "fwd+bwd":
        fresh = fresh_for(named, inputs) if shift else None
        return _printed(InputSet(lambda: backward_grads(forward(), (q, k, v), grad_out), named, inputs, fresh,
                                 leaves=(q, k, v), grad_out=grad_out, redrawn=redrawn))
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
    """``s`` with a digest of each input it hands the call (those redrawn before every call excepted)."""
    s.prints = {}
    redrawn = {id(x) for x in (s.fresh.live if s.fresh is not None else s.redrawn)}
    for name, x in s.named:
        if id(x) in redrawn:
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


def check_kept(kept: list[Print], sets: list[InputSet], case: AttentionCase, mode: str) -> OutputChecks:
    """Each chosen call's fingerprints against float64 on its own inputs: the problems found and what was checked."""
    with one_thread():
        return _check_kept(kept, sets, case, mode)


def _inputs_of(k: Print, s: InputSet, case: AttentionCase) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(q, k, v) in float64 as call ``k`` saw them: regenerated from its seed where they were redrawn."""
    redrawn = s.fresh.values(k.seed) if s.fresh is not None and k.seed is not None else {}
    plain = s.leaves or (s.named[0][1], s.inputs.k, s.inputs.v)
    q = redrawn["q"] if "q" in redrawn else to_float64(plain[0])
    if case.self_attention:
        return q, q, q
    k64 = redrawn["k"] if "k" in redrawn else to_float64(plain[1] if s.leaves else s.inputs.k)
    v64 = redrawn["v"] if "v" in redrawn else to_float64(plain[2] if s.leaves else s.inputs.v)
    if s.inputs.k_scale is not None and case.kv_scales is not None:  # an FP8 cache: stored times scale (never redrawn)
        k64 = dequantize(s.inputs.k.cpu(), s.inputs.k_scale.cpu(), case.kv_scales)
        v64 = dequantize(s.inputs.v.cpu(), s.inputs.v_scale.cpu(), case.kv_scales)
    return q, k64, v64


def _check_kept(kept: list[Print], sets: list[InputSet], case: AttentionCase, mode: str) -> OutputChecks:
    gen = torch.Generator().manual_seed(ENTROPY.getrandbits(63))  # rows the plugin cannot predict
    problems: list[str] = []
    checked: list[CheckedCall] = []
    for k in kept:
        if k.problem or not k.prints:  # a violation (reported as such): nothing of its own to compare
            continue
        s = sets[k.set_index]
        wrong_dtype = [d for d in k.dtypes if d not in ("none", case.dtype)]
        if wrong_dtype:  # as verify fails it: the float64 fingerprint would hide it
            problems.append(f"timed sample {k.index} (input set {k.set_index}): output dtype {wrong_dtype[0]}, "
                            f"expected {case.dtype} (q's dtype)")
            continue
        q, k64, v64 = _inputs_of(k, s, case)
        if mode == "fwd":
            err, bound, where, why = _check_forward(k, q, k64, v64, s, case, gen)
        elif case.batch * case.heads * case.tq * case.tk <= GRAD_CHECK_PAIRS:
            (err, bound, why), where = _check_grads(k, q, k64, v64, s, case), "all rows"
        else:
            checked.append(CheckedCall(sample=k.index, set=k.set_index, checked="not checked (gradients of a case "
                                       f"above {GRAD_CHECK_PAIRS} pairs)"))
            continue
        checked.append(CheckedCall(sample=k.index, set=k.set_index, rows=where, max_abs_err=err, bound=bound))
        if why is not None:
            problems.append(f"timed sample {k.index} (input set {k.set_index}), {where}: {why}")
    return OutputChecks(problems, checked)


def _verdict(what: str, err: float, bound: float) -> str | None:
    if err <= bound:
        return None
    return (f"{what} fingerprint (output . r, r drawn after the call) max|err| {err:.3g} > bound {bound:.3g} "
            "(verify's element bound times sum|r|)")


def _check_forward(k: Print, q: torch.Tensor, k64: torch.Tensor, v64: torch.Tensor, s: InputSet, case: AttentionCase,
                   gen: torch.Generator) -> tuple[float, float, str, str | None]:
    okw = s.inputs.oracle_kwargs(case)
    big = case.batch * case.heads * case.tq * case.tk > FULL_ROWS_PAIRS
    rows = sample_rows(case.tq, CHECK_ROWS if big else case.tq, gen)
    listed = rows.tolist() if len(rows) <= 8 else rows.tolist()[:4] + ["..."] + rows.tolist()[-2:]
    shown = f"rows {listed}"
    want = reference_rows(q, k64, v64, rows, **okw)
    f, r = k.prints[0], k.vectors[0]
    expected = (want.shape[0], want.shape[1], case.tq)  # the fingerprint has every row; the check reads ``rows``
    if f is None or r is None or f.dim() != 3 or tuple(f.shape) != expected or r.numel() != want.shape[-1]:
        got = "none" if f is None or r is None else f"{tuple(f.shape)} x {r.numel()}"
        return float("inf"), 0.0, shown, f"output shape {got}, expected {expected} x {want.shape[-1]}"
    dt = TORCH_DTYPES[case.dtype]
    bias = None if okw["bias"] is None else okw["bias"].to(dt)
    sinks = None if okw["sinks"] is None else okw["sinks"].to(dt)
    base, logits = baseline_rows(q.to(dt), k64.to(dt), v64.to(dt), rows, causal=case.causal, mask=okw["mask"],
                                 scale=case.scale, bias=bias, sinks=sinks, softcap=case.softcap,
                                 **case.structure_kwargs())
    magnitude = float(want.abs().max()) if want.numel() else 0.0
    element = OUTPUT_M * float((to_float64(base) - want).abs().max()) + floor_for(case.dtype, magnitude, logits)
    err, bound = projected_error(f[:, :, rows], want, r, element)
    return err, bound, shown, _verdict("output", err, bound)


def _check_grads(k: Print, q: torch.Tensor, k64: torch.Tensor, v64: torch.Tensor, s: InputSet,
                 case: AttentionCase) -> tuple[float, float, str | None]:
    okw = s.inputs.oracle_kwargs(case)
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
    cancelled = abs(scale) * float(grouped_matmul(dout, v64.transpose(-1, -2)).abs().max()) \
        * max(float(q.abs().max()), float(k64.abs().max()))
    magnitude = max(float(w.abs().max()) for w in want)
    worst = (0.0, 0.0, None)
    for index, (name, w, b) in enumerate(zip(("dq", "dk", "dv"), want, base)):
        f = k.prints[index] if index < len(k.prints) else None
        r = k.vectors[index] if index < len(k.vectors) else None
        if f is None or r is None or tuple(f.shape) != tuple(w.shape[:-1]) or r.numel() != w.shape[-1]:
            return float("inf"), 0.0, f"{name} missing or shaped unlike {tuple(w.shape)}"
        scale_of = magnitude if name == "dv" else max(magnitude, cancelled)
        element = GRAD_M * float((to_float64(b) - w).abs().max()) + floor_for(case.dtype, scale_of)
        err, bound = projected_error(f, w, r, element)
        why = _verdict(name, err, bound)
        if why is not None:
            return err, bound, why
        if err / bound > (worst[0] / worst[1] if worst[1] else -1.0):
            worst = (err, bound, None)
    return worst


def profile_call(call: Any) -> list[list[Any]]:
    """One call under torch.profiler: the top ATen operators by their self time as a share of the call's
    wall time, [[name, share], ...]. Work outside ATen (a C++ extension's own loops, NumPy) shows as no
    operator: a "custom kernel" that delegates to SDPA shows as 90% in SDPA's operator."""
    # the autograd profiler without Kineto: the same ATen events, ready in milliseconds, where Kineto's
    # first use in a process takes seconds. Kineto still logs "USDT: ... profiler_start/stop" lines to the
    # process's stderr at each start and stop, past its own levels: KINETO_LOG_LEVEL 6, read on first use,
    # keeps them out of the command's output (a user's own setting stands)
    os.environ.setdefault("KINETO_LOG_LEVEL", "6")
    with torch.autograd.profiler.profile(use_kineto=False) as prof:
        started = CLOCK()
        out = call()
        wall_us = (CLOCK() - started) * 1e6
    del out
    events = [e for e in prof.key_averages() if e.self_cpu_time_total > 0 and e.key.startswith("aten::")]
    top = sorted(events, key=lambda e: -e.self_cpu_time_total)[:PROFILE_TOP]
    return [[e.key, round(min(1.0, e.self_cpu_time_total / wall_us), 4)] for e in top if wall_us > 0]


for _name in (__name__, "harness.reference.oracle", "harness.reference.tolerance", "harness.reference.tensors"):  # the check's own code
    state.watch_module(sys.modules[_name])
