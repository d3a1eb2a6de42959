"""Checks of one kernel case: the output and gradients against the oracle, and the properties.

:func:`harness.verify.case_checks.check_kernel_case` runs every check that applies to a case and returns one verify
cell body per check: ``{"check", "status", "reason", "metrics"}`` (see
:mod:`harness.results`). A check that raises becomes ``error`` with the exception's type,
message and the line that raised; the other checks of the case still run.

The output check runs ``trials`` seeded trials with fresh inputs each (so an output cached
across calls of one shape is caught) and also fails on a wrong shape, dtype, device or
array type, on inputs changed by the call, and on NaN/Inf where the oracle is finite.

It is one module: the gradient check runs on the output check's trial machinery (seeds,
sampled rows, the oracle with its baseline, the floor's largest logit), which is also what the property, LSE
and growth checks import from here; apart, each would import the other's internals.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from harness.case.attention import AttentionCase
from harness.contract.registry import Implementation
from harness.reference.integrity import live_threads, result_problem, thread_problem
from harness.reference.oracle import (
    allowed_keys,
    allowed_rows,
    capped,
    grouped_matmul,
    reference_attention,
    reference_rows,
    sample_rows,
)
from harness.reference.tensors import (
    GRAD_VIA,
    TORCH_DTYPES,
    Inputs,
    OracleKeywords,
    aux,
    backward_grads,
    dtype_name,
    make_inputs,
    to_float64,
)
from harness.reference.tolerance import (
    GRAD_M,
    OUTPUT_M,
    Verdict,
    baseline_attention,
    compare,
    exponent_term,
    forward_exponent_term,
)
from harness.verify.boundary import Watch, arguments
from harness.verify.empty_rows import as_contract_rows as as_contract_rows
from harness.verify.empty_rows import by_empty_row_convention, empty_query_rows
from harness.verify.memo import MEMO
from harness.verify.outcome import CheckResult as CheckResult

PASS, FAIL, ERROR = "pass", "fail", "error"
SEED_BASE = 1000
"""Trial ``i`` draws its inputs with seed ``SEED_BASE + i``."""
SAMPLE_ABOVE_SCORES = 1 << 22
"""A case with more scores (B x H x Tq x Tk) than this is checked on sampled query rows: the float64
oracle of a whole large case is dear, that of a few rows exact and cheap (:func:`harness.reference.oracle.reference_rows`)."""
SAMPLED_ROWS = 48
"""Query rows checked per trial of a large case: random ones, always with the first and the last."""
LARGE_ELEMENTS = 1 << 22
"""A case with more elements than this (scores, plus q, k and v) is an edge of size: checked with one trial
and no properties (a property repeats the call); its state across calls is checked on the small cases."""


def large_case(case: AttentionCase) -> bool:
    """Whether ``case`` is past :data:`LARGE_ELEMENTS` (B x H x (Tq x Tk + (Tq + Tk) x d))."""
    return case.batch * case.heads * (case.tq * case.tk + (case.tq + case.tk) * case.d) > LARGE_ELEMENTS

def cell(check: str, status: str, reason: str | None = None, metrics: Mapping[str, object] | None = None) -> CheckResult:
    return CheckResult(check=check, status=status, reason=reason, metrics=metrics or {})


def describe_exception(exc: BaseException) -> str:
    """'Type: message (at file:line)': the frame that raised, so an error says where."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" (at {frames[-1].filename}:{frames[-1].lineno})" if frames else ""
    return f"{type(exc).__name__}: {exc}{where}"


class ContractViolation(Exception):
    """The implementation broke the contract (shape, dtype, device, array type) inside a check."""


def guarded(check: str, fn: Callable[[], CheckResult]) -> CheckResult:
    """Run one check; an exception from the implementation (or anywhere) is that check's ``error``."""
    started = time.perf_counter()
    try:
        result = fn()
    except ContractViolation as exc:
        result = cell(check, FAIL, str(exc))
    except Exception as exc:  # noqa: BLE001 - the outcome records the type, message and place
        result = cell(check, ERROR, describe_exception(exc))
    return replace(result, seconds=time.perf_counter() - started)


def call_arguments(impl: Implementation, case: AttentionCase, inputs: Inputs, q: Any = None, k: Any = None,
                   v: Any = None) -> tuple[Any, Any, Any, dict[str, object]]:
    """(q, k, v, keyword arguments) of one call as the contract passes them (page pools to a paged kernel)."""
    native_q, native_k, native_v = inputs.arrays(impl.declared.structures)
    q = native_q if q is None else q
    k = native_k if k is None else k
    v = native_v if v is None else v
    return q, k, v, inputs.kwargs(case, impl.declared.structures)


def call(impl: Implementation, case: AttentionCase, inputs: Inputs, q: Any = None, k: Any = None, v: Any = None,
         **extra: Any) -> Any:
    """One call of the implementation through its ``prepare`` (set-up included)."""
    q, k, v, kwargs = call_arguments(impl, case, inputs, q, k, v)
    return impl.prepare(q, k, v, **{**kwargs, **extra})()  # ``extra`` may replace a keyword (an FP8 cache's scales)


def watched_call(impl: Implementation, case: AttentionCase, inputs: Inputs) -> tuple[Any, str | None]:
    """One call, and what it wrote to that it did not allocate (:class:`~harness.verify.boundary.Watch`)."""
    q, k, v, kwargs = call_arguments(impl, case, inputs)
    watch = Watch(arguments(q, k, v, kwargs))
    out = impl.prepare(q, k, v, **kwargs)()
    return out, watch.problem()


def sampled_rows(case: AttentionCase, trial: int) -> torch.Tensor | None:
    """The query rows a large case is checked on in ``trial`` (seeded), or None: every row."""
    if case.batch * case.heads * case.tq * case.tk <= SAMPLE_ABOVE_SCORES:
        return None
    return sample_rows(case.tq, SAMPLED_ROWS, torch.Generator().manual_seed(SEED_BASE + 7 * trial + 3))


def oracle_and_base(case: AttentionCase, inputs: Inputs, v64: torch.Tensor | None = None,
                    k64: torch.Tensor | None = None, rows: torch.Tensor | None = None
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """The float64 oracle and the same formula in the case's dtype (as float64), for these inputs;
    of the query rows ``rows`` only when given (compare with ``out[:, :, rows]``). Reused within a worker
    while the inputs are equal (:mod:`harness.verify.memo`)."""
    k64 = inputs.k64 if k64 is None else k64
    v64 = inputs.v64 if v64 is None else v64
    if not _reused(case):
        return _oracle_and_base(case, inputs, v64, k64, rows)
    return MEMO.get("oracle_and_base", case, (*_reference_inputs(inputs), k64, v64, rows),
                    lambda: _oracle_and_base(case, inputs, v64, k64, rows))


def _reused(case: AttentionCase) -> bool:
    """Whether a case's checks ask for its reference more than once: the cases that get properties (a grad case,
    an edge of size and a point of the error-growth sweep get none), so memoising the others would only copy."""
    return not (case.grad or case.growth or large_case(case))


def _reference_inputs(inputs: Inputs) -> tuple[torch.Tensor | None, ...]:
    """Every tensor the oracle reads besides K and V: what a memoised answer must have been computed on."""
    return inputs.q64, inputs.k64, inputs.v64, inputs.mask64, inputs.bias64, inputs.sinks64


def _oracle_and_base(case: AttentionCase, inputs: Inputs, v64: torch.Tensor, k64: torch.Tensor,
                     rows: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    kwargs = inputs.oracle_kwargs(case)
    if rows is None:
        oracle = reference_attention(inputs.q64, k64, v64, **kwargs)
    else:
        oracle = reference_rows(inputs.q64, k64, v64, rows, **kwargs)
    dt = TORCH_DTYPES[case.dtype]
    bias = None if kwargs["bias"] is None else kwargs["bias"].to(dt)
    sinks = None if kwargs["sinks"] is None else kwargs["sinks"].to(dt)
    base = baseline_attention(inputs.q64.to(dt), k64.to(dt), v64.to(dt), causal=case.causal,
                              mask=kwargs["mask"], scale=case.scale, bias=bias, rows=rows, sinks=sinks,
                              softcap=case.softcap, **case.structure_kwargs())
    return oracle, base.to(torch.float64)


def logit_max(case: AttentionCase, inputs: Inputs, rows: torch.Tensor | None = None, *, terms: bool = False) -> float:
    """max |scale * q.k + bias| over the keys each query (of ``rows``, when given) may attend to (float64):
    sizes the rule's floor. In float64 times sqrt(d) (:func:`floor_logit_factor`). Reused like the oracle.

    ``terms``: max of ``|scale| * sum_i |q_i k_i| + |bias|`` instead, the size of the terms a logit is summed
    from, which bounds its rounding in any summation order however much they cancel (a logit of 142 from terms
    of 492 moved a correct kernel's recomputed weights by 1.9 eps * 142). The backward's floor uses it
    (:func:`harness.reference.tolerance.exponent_term`): a kernel that recomputes P from the forward's
    log-sum-exp forms S twice, in two orders, and the baseline's exp(S - max S) is exact on a dominant key. An
    upper bound under a soft-cap too (the cap's slope is at most 1)."""
    if not _reused(case):
        return _logit_max(case, inputs, rows, terms)
    return MEMO.get("logit_terms_max" if terms else "logit_max", case, (*_reference_inputs(inputs), rows),
                    lambda: _logit_max(case, inputs, rows, terms))


def exponent_max(case: AttentionCase, inputs: Inputs, rows: torch.Tensor | None = None) -> float:
    """The logit term of an output's floor (:func:`harness.reference.tolerance.forward_exponent_term` of
    :func:`logit_max`): a forward may normalise by its log-sum-exp, rounding both S and LSE."""
    return forward_exponent_term(case.dtype, logit_max(case, inputs, rows), case.tk)


def _logit_max(case: AttentionCase, inputs: Inputs, rows: torch.Tensor | None, terms: bool) -> float:
    kwargs = inputs.oracle_kwargs(case)
    q = inputs.q64 if rows is None else inputs.q64[:, :, rows]
    # grouped, as the oracle forms its logits: a GQA cache is never repeated per query head
    if terms:
        logits = grouped_matmul(q.abs(), inputs.k64.abs().transpose(-1, -2)) * abs(case.effective_scale)
    else:
        logits = capped(grouped_matmul(q, inputs.k64.transpose(-1, -2)) * case.effective_scale, case.softcap)
    if kwargs["bias"] is not None:
        bias = kwargs["bias"].abs() if terms else kwargs["bias"]
        logits = logits + (bias if rows is None else bias.expand(*bias.shape[:-2], case.tq, case.tk)[..., rows, :])
    where = dict(causal=case.causal, mask=kwargs["mask"], **case.structure_kwargs())
    allowed = allowed_keys(case.tq, case.tk, **where) if rows is None else allowed_rows(rows, case.tq, case.tk, **where)
    if allowed is not None:
        logits = logits.masked_fill(~allowed, 0.0)
    sinks = 0.0 if inputs.sinks64 is None else float(inputs.sinks64.abs().max())
    return max(float(logits.abs().max()) if logits.numel() else 0.0, sinks) * floor_logit_factor(case)


def floor_logit_factor(case: AttentionCase) -> float:
    """What the floor's ``eps * max|logit|`` term is multiplied by: sqrt(d) in float64, else 1.

    A logit L formed as a d-term dot product carries about sqrt(d) roundings of eps * L in another summation order,
    not one. Outside float64 the baseline forms its logits in the same dtype and pays the same, so ``m * baseline``
    covers a correct kernel's order; in float64 the baseline *is* the oracle's arithmetic (error ~1e-16), the floor
    alone bounds the check, and with logits of 1e5 (``inputs="huge"``) a correct float64 kernel summing in another
    order is 1.5-2x past eps * L (measured on the correct plugins of tests/verifier/blind and blind_models)."""
    return float(case.d) ** 0.5 if case.dtype == "float64" else 1.0


def structure_problem(impl: Implementation, case: AttentionCase, out: Any, shape: tuple[int, ...]) -> str | None:
    """Wrong array type, shape, dtype or device: the first problem found, or None."""
    kind = torch.Tensor if impl.declared.backend == "torch" else np.ndarray
    if not isinstance(out, kind):
        return f"returned {type(out).__name__}, expected {kind.__module__}.{kind.__name__} (backend={impl.declared.backend})"
    if tuple(out.shape) != shape:
        return f"output shape {tuple(out.shape)}, expected {shape} (B, H, Tq, dv: V's head dim)"
    if dtype_name(out) != case.dtype:
        return f"output dtype {dtype_name(out)}, expected {case.dtype} (q's dtype)"
    if isinstance(out, torch.Tensor) and out.device.type != case.device:
        return f"output on device {out.device}, expected {case.device}"
    return None


_CALLED: set[str] = set()
"""Implementations already called in this process: their thread pools, if any, are running by now."""


def returned_problem(impl: Implementation, inputs: Inputs, out: Any, threads: frozenset[int]) -> str | None:
    """An exact, materialised array of its own, with no thread of the call left running
    (:mod:`harness.reference.integrity`, the checks bench applies to its timed calls too). A first call may
    start a thread pool that stays for later calls, so threads are checked from the second call on."""
    named = [("q", inputs.q), ("k", inputs.k), ("v", inputs.v), ("mask", inputs.mask), ("bias", inputs.bias),
             ("k_pages", inputs.k_pages), ("v_pages", inputs.v_pages), ("k_scale", inputs.k_scale),
             ("v_scale", inputs.v_scale)]
    first = impl.name not in _CALLED
    _CALLED.add(impl.name)
    return result_problem(out, named, impl.declared.backend) or (None if first else thread_problem(threads))


def worst_of(verdicts: list[tuple[int, Verdict]]) -> tuple[int, Verdict]:
    """The failing trial if any, else the trial closest to its bound."""
    for trial, verdict in verdicts:
        if not verdict.ok:
            return trial, verdict

    def closeness(item: tuple[int, Verdict]) -> float:
        m = item[1].metrics
        return m.get("max_abs_err", 0.0) / m["bound"] if m.get("bound") else 0.0

    return max(verdicts, key=closeness)


def finish(check: str, verdicts: list[tuple[int, Verdict]], trials: int) -> CheckResult:
    trial, verdict = worst_of(verdicts)
    metrics = {**verdict.metrics, "trials": trials, "worst_trial": trial}
    if verdict.ok:
        return cell(check, PASS, None, metrics)
    reason = verdict.reason if trials == 1 else f"trial {trial} (seed {SEED_BASE + trial}): {verdict.reason}"
    return cell(check, FAIL, reason, metrics)


def check_output(impl: Implementation, case: AttentionCase, trials: int) -> CheckResult:
    """The output against the oracle over ``trials`` fresh seeded inputs, plus the contract's structure."""
    verdicts: list[tuple[int, Verdict]] = []
    shape = (case.batch, case.heads, case.tq, case.value_dim)
    for trial in range(trials):
        inputs = make_inputs(case, SEED_BASE + trial, impl.declared.backend)
        threads = live_threads()
        out, wrote = watched_call(impl, case, inputs)
        problem = structure_problem(impl, case, out, shape) or returned_problem(impl, inputs, out, threads) or wrote
        if problem:
            verdicts.append((trial, Verdict(False, problem, {})))
            break
        rows = sampled_rows(case, trial)
        oracle, base = oracle_and_base(case, inputs, rows=rows)
        got = to_float64(out) if rows is None else to_float64(out)[:, :, rows]
        empty = empty_query_rows(case, inputs, rows)
        try:
            got, oracle, assumed = by_empty_row_convention(impl.declared.conventions, got, oracle, inputs.v64, empty, case.sinks)
        except ValueError as exc:  # NaN declared and not given
            raise ContractViolation(str(exc)) from None
        if assumed.get("empty_row_expected") == "mean_v":
            base = torch.where(empty[..., None], oracle, base)  # type: ignore[index]
        verdict = compare(got, oracle, base, dtype=case.dtype, m=OUTPUT_M, logit_max=exponent_max(case, inputs, rows))
        verdict.metrics.update(assumed, conventions=impl.declared.conventions.describe())
        if rows is not None:
            verdict.metrics["sampled_rows"] = len(rows)
            if verdict.metrics.get("worst_index"):  # the case's own row, not the sample's
                verdict.metrics["worst_index"][2] = int(rows[verdict.metrics["worst_index"][2]])
        verdicts.append((trial, verdict))
        if not verdicts[-1][1].ok:
            break
    return finish("output", verdicts, trials)


def _grads(fn: Callable[..., torch.Tensor], leaves: list[torch.Tensor], dout: torch.Tensor) -> list[torch.Tensor | None]:
    out = fn(*leaves)
    if not isinstance(out, torch.Tensor) or not out.requires_grad:
        raise TypeError("the output does not require grad: the implementation is not differentiable "
                        "(grad=True promises torch autograd through the call)")
    return list(backward_grads(out, leaves, dout.to(out.dtype)))


def _cancelled_terms(case: AttentionCase, inputs: Inputs, dout64: torch.Tensor) -> float:
    """The size of the terms dq and dk are the difference of: dS = P * (dO V^T - rowsum(dO * O)), then
    dq = scale dS K and dk = scale dS^T Q. A dq that cancels to ~0 (a row with one key) still carries
    rounding of scale * max|dO V^T| * max|K| in any correct kernel; with randn inputs this is about
    max|dq|, but with large V (``inputs="wide"``) it is orders of magnitude more. ``dout64`` may be the
    sampled rows' only (the others are zero)."""
    scale = case.d ** -0.5 if case.scale is None else case.scale
    qk = max(float(inputs.q64.abs().max()), float(inputs.k64.abs().max()))
    return float(abs(scale) * float(grouped_matmul(dout64, inputs.v64.transpose(-1, -2)).abs().max()) * qk)


def _value_terms(case: AttentionCase, inputs: Inputs, okw: OracleKeywords, rows: torch.Tensor | None,
                 dout64: torch.Tensor) -> float:
    """max(P^T |dO|): the largest sum of absolute terms an element of dV adds up (over a GQA group's query
    heads and every row that attends its key). A backward that recomputes P from the saved log-sum-exp moves
    every term by a relative eps * max|logit|, so dV's error scales by this sum, however small dV is after
    the terms cancel. dV is linear in dO, so it is the oracle's dV for the upstream gradient |dO|."""
    v = inputs.v64.detach().requires_grad_()
    q, k = inputs.q64.detach(), inputs.k64.detach()
    out = reference_attention(q, k, v, **okw) if rows is None else reference_rows(q, k, v, rows, **okw)
    (dv,) = torch.autograd.grad(out, v, dout64.abs())
    return float(dv.abs().max()) if dv.numel() else 0.0


def _upstream(case: AttentionCase, trial: int, rows: torch.Tensor | None) -> torch.Tensor:
    """The backward's upstream gradient dO (float64, representable in the case's dtype); on a large case
    zero outside the sampled rows, so that the exact gradients are those of the sampled rows' outputs."""
    gen = torch.Generator().manual_seed(SEED_BASE + 7919 + trial)
    dout64 = torch.randn(case.batch, case.heads, case.tq, case.value_dim, generator=gen, dtype=torch.float64)
    if rows is not None:
        keep = torch.zeros(case.tq, dtype=torch.float64)
        keep[rows] = 1.0
        dout64 = dout64 * keep[:, None]
    return dout64.to(TORCH_DTYPES[case.dtype]).to(torch.float64)


def _grad_trial(impl: Implementation, case: AttentionCase, trial: int) -> list[Verdict]:
    """One trial of the gradient check: a verdict per input gradient, in order. A large case's gradients
    are those of its sampled rows' outputs (dO zero elsewhere): exact against :func:`reference_rows`.
    Rows with no allowed key get dO = 0 unless the conventions declare zeros there (their value is the
    convention's, checked by the output check; their gradient is not the contract's)."""
    names = (["dx"] if case.self_attention else ["dq", "dk", "dv"]) + (["dsinks"] if case.sinks else [])
    dt = TORCH_DTYPES[case.dtype]
    inputs = make_inputs(case, SEED_BASE + trial, "torch")
    rows = sampled_rows(case, trial)
    dout64 = _upstream(case, trial, rows)
    empty = empty_query_rows(case, inputs)
    if empty is not None and impl.declared.conventions.empty_row != "zeros" and not case.sinks:
        dout64 = dout64.masked_fill(empty[..., None], 0.0)
    dout_rows = dout64 if rows is None else dout64[:, :, rows]
    kw, okw = inputs.kwargs(case, impl.declared.structures), inputs.oracle_kwargs(case)
    bias_dt = None if okw["bias"] is None else okw["bias"].to(dt)
    dout = aux(dout64.to(dt).to(case.device), case, "dout")  # the upstream gradient crosses the boundary too

    def leaves_of(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, sinks: torch.Tensor | None) -> list[torch.Tensor]:
        arrays = [q] if case.self_attention else [q, k, v]
        arrays += [sinks] if sinks is not None else []
        return [x.detach().requires_grad_() for x in arrays]

    def split(leaves: tuple[torch.Tensor, ...]) -> tuple[tuple[torch.Tensor, ...], dict[str, torch.Tensor]]:
        extra = {"sinks": leaves[-1]} if case.sinks else {}
        arrays = leaves[:-1] if case.sinks else leaves
        return ((arrays[0],) * 3 if case.self_attention else arrays), extra

    def implementation(*ls: torch.Tensor) -> torch.Tensor:
        qkv, extra = split(ls)
        out: torch.Tensor = impl.prepare(*qkv, **{**kw, **extra})()
        return out

    def oracle(*ls: torch.Tensor) -> torch.Tensor:
        (q, k, v), extra = split(ls)
        o = okw.copy()
        o["sinks"] = extra.get("sinks", okw["sinks"])  # the leaf, so that d sinks flows
        return reference_attention(q, k, v, **o) if rows is None else reference_rows(q, k, v, rows, **o)

    def baseline(*ls: torch.Tensor) -> torch.Tensor:
        qkv, extra = split(ls)
        return baseline_attention(*qkv, causal=case.causal, mask=okw["mask"], scale=case.scale, bias=bias_dt, rows=rows,
                                  softcap=case.softcap, **extra, **case.structure_kwargs())

    sinks = inputs.sinks
    watch = Watch({**arguments(inputs.q, inputs.k, inputs.v, kw), "dout": dout})
    got = _grads(implementation, leaves_of(inputs.q, inputs.k, inputs.v, sinks), dout)
    wrote = watch.problem()
    if wrote:
        return [Verdict(False, f"backward: {wrote}", {})]
    want = _grads(oracle, leaves_of(inputs.q64, inputs.k64, inputs.v64, inputs.sinks64), dout_rows)
    sinks_dt = None if inputs.sinks64 is None else inputs.sinks64.to(dt)
    base = _grads(baseline, leaves_of(inputs.q64.to(dt), inputs.k64.to(dt), inputs.v64.to(dt), sinks_dt), dout_rows)
    logits = exponent_term(logit_max(case, inputs, rows, terms=True), case.tk)
    magnitude = max(float(w.abs().max()) for w in want[:3] if w is not None)
    magnitudes = {"dv": magnitude, "dsinks": max((float(w.abs().max()) for w in want[-1:] if w is not None), default=0.0)}
    cancelled = max(magnitude, _cancelled_terms(case, inputs, dout_rows))
    value_terms = _value_terms(case, inputs, okw, rows, dout_rows)
    logit_magnitudes = {"dv": value_terms, "dx": value_terms}
    assumed = {"conventions": impl.declared.conventions.describe(), "grad_via": GRAD_VIA}
    verdicts = []
    for name, g, w, b in zip(names, got, want, base):
        if g is None:
            verdicts.append(Verdict(False, f"{name} is None: the output does not depend on {name[1:]} through autograd", {}))
        elif dtype_name(g) != case.dtype:
            verdicts.append(Verdict(False, f"{name} dtype {dtype_name(g)}, expected {case.dtype}", {}))
        else:
            assert w is not None and b is not None
            verdict = compare(to_float64(g), w, to_float64(b), dtype=case.dtype, m=GRAD_M, what=name,
                              logit_max=logits, magnitude=magnitudes.get(name, cancelled),
                              logit_magnitude=logit_magnitudes.get(name, 0.0))
            verdict.metrics.update(assumed)
            verdicts.append(verdict)
    return verdicts


def check_grad(impl: Implementation, case: AttentionCase, trials: int) -> CheckResult:
    """dq, dk, dv (and d sinks) by autograd through the implementation (``.backward()``, :data:`GRAD_VIA`),
    against float64 autograd of the oracle."""
    verdicts: list[tuple[int, Verdict]] = []
    for trial in range(trials):
        verdicts += [(trial, v) for v in _grad_trial(impl, case, trial)]
        if not all(v.ok for _, v in verdicts):
            break
    return finish("grad", verdicts, trials)
