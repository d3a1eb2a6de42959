"""The pass rule: an implementation may be as wrong as the formula computed in its own dtype, times m.

    pass  when  max|out - oracle|  <=  m * max|base - oracle|  +  floor
    floor  =  max(1, max|oracle|) * (FLOORS[dtype] + eps(dtype) * max|logit|)

``oracle`` is :func:`harness.reference.oracle.reference_attention` in float64 on the same (rounded)
inputs; ``base`` is the same formula computed in the case's dtype (:func:`baseline_attention`:
matmul, masked softmax, matmul, no upcast). This is the rule of the FlashAttention and
PyTorch SDPA tests: the error a plain implementation makes in this dtype, on these inputs,
is the yardstick, so one rule serves float64 and bfloat16, T = 1 and T = 1025, randn and
large logits, without a magic ``atol``.

Why these numbers:

- ``m = 2`` for outputs, ``m = 3`` for gradients (FlashAttention's tests use 2 for outputs;
  its and SDPA's gradient checks use 3 or more, because a backward pass chains more
  roundings). A kernel that keeps a float32 accumulator for half inputs sits well inside;
  one that drops a block, skips the rescale or picks the wrong head is off by orders of
  magnitude.
- ``floor`` covers cases where the baseline happens to be (nearly) exact, e.g. T = 1 (the
  output is a copy of V) or float64 (the baseline *is* the oracle's arithmetic): a correct
  kernel that sums in another order still differs by a few units in the last place. It is
  a handful of ulps of the output's magnitude (FlashAttention-3 uses twice the rounding
  error of the output, ``(out_ref + 0.3 - 0.3 - out_ref).abs().max()``); float64's floor is
  looser (1e-12) because long float64 reductions in another order still differ by ~1e-14.
  Plus one term for large logits: a logit of magnitude L, rounded to the dtype, moves its
  softmax weight by a relative ``L * eps``; every implementation that forms logits in the
  dtype pays it, in a way that depends on its arithmetic (the log-sum-exp form, for one,
  pays it on the normaliser), and the baseline is only one draw of that rounding. So::

      floor = max(1, max|oracle|) * (FLOORS[dtype] + eps(dtype) * max|logit|)

  With randn inputs max|logit| is about 4 and this term is below FLOORS; with logits in
  the hundreds it dominates, as it must. A gradient's term is ``eps * (2 L + ln Tk)``
  (:func:`backward_logit_term`): a backward from the saved log-sum-exp rounds S and LSE both, and forms S
  in an order of its own, so ``L`` is the size of the terms a logit sums, ``max |scale| sum |q_i k_i|``, not
  only its value. For dV that term scales by ``max(P^T |dO|)``, the sum of the terms an element adds up
  (``logit_magnitude`` in :func:`compare`), which a GQA group's rows can make far larger than ``max|dV|``.
  For gradients the magnitude is the largest of max|dq|, max|dk|, max|dv|, and for dq and
  dk also the size of the terms they cancel: the backward forms dS = P * (dO.V^T - rowsum(dO * O)),
  then dq = scale dS K, so a dq that is ~0 (a causal row with one key) still carries rounding
  of scale * max|dO.V^T| * max|K| (SDPA's dq there: 3.7e-6 where max|dq| is 3.5; with V near
  1e19, FlashAttention's rowsum(dO * O) over a rounded O leaves ~1e14).
- A relative-L2 sanity bound: the whole output must also be close in norm,
  ``||out - oracle|| / ||oracle|| <= max(rel_l2_bound(dtype), m * rel_l2(base), logit term)``,
  so that an all-zeros answer never passes on small values. The logit term is the floor's
  large-logit allowance as a relative L2 error: an error of ``max(1, magnitude) * eps * max|logit|``
  in every element, over ``||oracle||``. Without it the norm bound is tighter than the max-error
  bound exactly where the max-error floor says rounding is expected: a correct FlashAttention
  backward recomputes P from the saved log-sum-exp, whose rounding (relative eps * |logit|) reaches
  dq through the cancelled terms, a relative L2 of 2.7e-4 on a float32 case with logits of 30 whose
  max error sits 80x under its bound. The constant FLOORS part stays out of it: on values below
  the floor the norm bound is what catches an all-zeros answer.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from harness.case.dtypes import TABLE
from harness.reference.oracle import allowed_keys, allowed_rows, capped, grouped_matmul

OUTPUT_M = 2.0
GRAD_M = 3.0
FLOORS: dict[str, float] = {"float64": 1e-12, "float32": 1e-6, "float16": 2e-3, "bfloat16": 1.6e-2}
"""Absolute floor per dtype for outputs of magnitude <= 1 (scaled by max(1, max|oracle|))."""
EPS: dict[str, float] = {name: TABLE[name].eps for name in FLOORS}
REL_L2_BOUNDS: dict[str, float] = {"float64": 1e-9, "float32": 1e-4, "float16": 2e-2, "bfloat16": 1e-1}
"""Relative-L2 sanity bound per dtype (a correct implementation is far below it)."""


def describe_rule() -> str:
    """The rule and its constants, one paragraph, for command output and result files."""
    floors = ", ".join(f"{k} {v:g}" for k, v in FLOORS.items())
    return (f"pass when max|out-oracle| <= m*max|base-oracle| + floor; m = {OUTPUT_M:g} (outputs), "
            f"{GRAD_M:g} (gradients); floor = max(1,max|oracle|)*(FLOORS[dtype] + eps(dtype)*max|logit|) "
            "(gradients: eps(dtype)*(2*max(|scale|*sum|q_i k_i|) + ln Tk), a backward from the saved log-sum-exp, "
            "scaled for dV by max(P^T|dO|), the terms its elements sum), "
            f"FLOORS: {floors}; base = the same formula in the case's dtype; oracle = float64")


def rule_config() -> dict[str, object]:
    """The constants as data, for the result file's ``config``."""
    return {"output_m": OUTPUT_M, "grad_m": GRAD_M, "floors": dict(FLOORS), "eps": dict(EPS),
            "rel_l2_bounds": dict(REL_L2_BOUNDS), "rule": describe_rule()}


def exponent_term(logit_max: float, tk: int) -> float:
    """The logit term of a floor, in place of ``max|logit|``: ``2 max|logit| + ln Tk``.

    A weight formed as exp(S - LSE) rounds both S and LSE, each up to max|logit| in size (LSE up to
    max|logit| + ln Tk), so it moves by a relative eps * (2 max|logit| + ln Tk): twice what exp(S - max S) pays,
    which is exactly 1 on a dominant key. Backward kernels recompute P so from the forward's saved log-sum-exp
    (FlashAttention's, and PyTorch's fused CPU and GPU kernels'); forwards that normalise by a log-sum-exp do the
    same (:func:`forward_exponent_term`). Measured: torch's CPU flash backward (AVX-512) at 2.2 eps * max|logit| on
    dV of a one-query case with logits near 115, where the plain float32 baseline was 66x closer; a float32 forward
    of exp(S - logsumexp(S)) at 4.7x the baseline's error on logits near 1e5 (``in=huge``, d 160, 8 keys). The
    backward passes the size of the terms each logit sums (``|scale| sum |q_i k_i|``)."""
    return 2.0 * logit_max + math.log(max(tk, 1))


def forward_exponent_term(dtype: str, logit_max: float, tk: int) -> float:
    """The logit term of an output's floor: ``max|logit|``, plus what a forward that normalises by its log-sum-exp
    (exp(S - LSE)) pays for rounding LSE, ``max|logit| + ln Tk`` at the precision it is accumulated in (float32, or
    the case's dtype where finer), expressed in the case dtype's eps. float32 and float64: the backward's
    ``2 max|logit| + ln Tk`` (:func:`exponent_term`); bfloat16 and float16 add next to nothing, since their logits
    and sums are float32."""
    accumulated = min(EPS[dtype], EPS["float32"])
    return logit_max + (logit_max + math.log(max(tk, 1))) * accumulated / EPS[dtype]


def floor_for(dtype: str, magnitude: float, logit_max: float = 0.0, logit_magnitude: float = 0.0) -> float:
    """The floor of the rule for outputs of max magnitude ``magnitude`` and logits up to ``logit_max``;
    ``logit_magnitude``, where larger, is the size of the terms the logit rounding acts on (see :func:`compare`)."""
    return max(1.0, magnitude) * FLOORS[dtype] + max(1.0, magnitude, logit_magnitude) * EPS[dtype] * logit_max


def logit_rel_l2(dtype: str, magnitude: float, logit_max: float, count: int, norm: float) -> float:
    """The floor's large-logit term, ``max(1, magnitude) * eps * max|logit|`` in each of ``count`` elements,
    as a relative L2 error against an oracle of norm ``norm`` (0 when there is no logit term or no norm)."""
    if logit_max <= 0 or norm <= 0:
        return 0.0
    return max(1.0, magnitude) * EPS[dtype] * logit_max * math.sqrt(count) / norm


def baseline_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
                       mask: torch.Tensor | None = None, scale: float | None = None,
                       bias: torch.Tensor | None = None, window: tuple[int, int] | None = None,
                       causal_align: str = "top_left", varlen: tuple[tuple[int, int], ...] | None = None,
                       cache_seqlens: tuple[int, ...] | None = None, rows: torch.Tensor | None = None,
                       key_ranges: Sequence[Any] = (), sinks: torch.Tensor | None = None,
                       softcap: float | None = None) -> torch.Tensor:
    """The textbook formula in the inputs' own dtype: the error yardstick (no upcast anywhere).
    ``rows`` (query indices) computes those rows only, (B, H, len(rows), d), at O(rows x Tk) cost: the
    baseline beside :func:`harness.reference.oracle.reference_rows` when a large case is checked on sampled rows."""
    tq, d = q.shape[-2], q.shape[-1]
    tk = k.shape[-2]
    scale = 1.0 / float(d) ** 0.5 if scale is None else float(scale)
    if rows is not None:
        rows = rows.to(device=q.device, dtype=torch.long)
        q = q[..., rows, :]
        bias = None if bias is None else bias.expand(*bias.shape[:-2], tq, tk)[..., rows, :]
    scores = capped(grouped_matmul(q, k.transpose(-1, -2)) * scale, softcap)
    if bias is not None:
        scores = scores + bias.to(scores.dtype)
    where = dict(causal=causal, mask=mask, device=q.device, window=window, causal_align=causal_align, varlen=varlen,
                 cache_seqlens=cache_seqlens, key_ranges=key_ranges)
    allowed = allowed_keys(tq, tk, **where) if rows is None else allowed_rows(rows, tq, tk, **where)  # type: ignore[arg-type]
    if allowed is not None:
        scores = scores.masked_fill(~allowed.expand(scores.shape), float("-inf"))
    if sinks is not None:  # gpt-oss: the sink joins the softmax as one more column, dropped before V
        column = sinks.to(scores.dtype).reshape(1, -1, 1, 1).expand(*scores.shape[:-1], 1)
        return grouped_matmul(torch.softmax(torch.cat([scores, column], dim=-1), dim=-1)[..., :-1], v)
    if allowed is None:
        return grouped_matmul(torch.softmax(scores, dim=-1), v)
    weights = torch.softmax(scores, dim=-1)
    weights = torch.where(allowed.expand(scores.shape).any(-1, keepdim=True), weights, torch.zeros((), dtype=weights.dtype))
    return grouped_matmul(weights, v)


def baseline_rows(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, rows: torch.Tensor, *, causal: bool = False,
                  mask: torch.Tensor | None = None, scale: float | None = None, bias: torch.Tensor | None = None,
                  window: tuple[int, int] | None = None, causal_align: str = "top_left",
                  varlen: tuple[tuple[int, int], ...] | None = None,
                  cache_seqlens: tuple[int, ...] | None = None, key_ranges: Sequence[Any] = (),
                  sinks: torch.Tensor | None = None, softcap: float | None = None) -> tuple[torch.Tensor, float]:
    """:func:`baseline_attention` of the query rows ``rows`` only (B, H, len(rows), d), in the inputs' dtype,
    and max|logit| over the keys those rows attend (float64): the rule's yardstick for a sampled-row check
    (:func:`harness.reference.oracle.reference_rows` is its oracle), at O(rows x Tk x d)."""
    where = dict(causal=causal, mask=mask, window=window, causal_align=causal_align, varlen=varlen,
                 cache_seqlens=cache_seqlens, key_ranges=key_ranges)
    base = baseline_attention(q, k, v, scale=scale, bias=bias, rows=rows, sinks=sinks, softcap=softcap,
                              **where)  # type: ignore[arg-type]
    tq, d = q.shape[-2], q.shape[-1]
    rows = torch.as_tensor(rows, dtype=torch.long).to(q.device)
    scale = 1.0 / float(d) ** 0.5 if scale is None else float(scale)
    logits = capped(grouped_matmul(q[..., rows, :].to(torch.float64),
                                   k.to(torch.float64).transpose(-1, -2)) * scale, softcap)
    if bias is not None:
        logits = logits + bias.expand(*bias.shape[:-2], tq, k.shape[-2])[..., rows, :].to(torch.float64)
    allowed = allowed_rows(rows, tq, k.shape[-2], device=q.device, **where)  # type: ignore[arg-type]
    if allowed is not None:
        logits = logits.masked_fill(~allowed.expand(logits.shape), 0.0)
    return base, float(logits.abs().max()) if logits.numel() else 0.0


@dataclass
class Verdict:
    """One comparison against the oracle: pass or the reason, and the numbers."""

    ok: bool
    reason: str | None
    metrics: dict[str, Any]


def compare(got: torch.Tensor, oracle: torch.Tensor, base: torch.Tensor, *, dtype: str, m: float,
            what: str = "output", logit_max: float = 0.0, magnitude: float | None = None,
            logit_magnitude: float = 0.0) -> Verdict:
    """Apply the rule to float64 tensors ``got`` (the implementation), ``oracle`` and ``base``.

    ``logit_magnitude``: the largest sum of absolute terms an element adds up, where it exceeds the element's
    own size: a rounding of every weight by a relative eps * max|logit| moves an element by that much times the
    sum, however much the terms cancel (dV = P^T dO over a GQA group's rows: max|dV| can be far below
    max(P^T |dO|)). Only the large-logit term scales by it; the constant floor stays at the output's size."""
    if got.shape != oracle.shape:
        return Verdict(False, f"{what} shape {tuple(got.shape)}, expected {tuple(oracle.shape)}", {})
    finite = torch.isfinite(oracle)
    if not bool(finite.all()):  # a NaN bound never trips `err > bound`: no check without a finite reference
        first = [int(i) for i in (~finite).nonzero()[0]]
        return Verdict(False, f"the float64 reference of {what} has {int((~finite).sum())} NaN/Inf value(s), first "
                              f"at {first}: the inputs (or a call that wrote into them) are not finite, so "
                              f"nothing can be checked", {"bound": None, "m": m, "worst_index": first})
    bad = ~torch.isfinite(got)
    if magnitude is None:
        magnitude = float(oracle.abs().max()) if oracle.numel() else 0.0
    floor = floor_for(dtype, magnitude, logit_max, logit_magnitude)
    if not (math.isfinite(floor) and math.isfinite(logit_max)):
        return Verdict(False, f"{what}: the bound is not finite (floor {floor}, max|logit| {logit_max}): nothing "
                              "can be checked against it", {"bound": None, "m": m, "floor": floor})
    diff = (got - oracle).abs()
    if bad.any():
        index = tuple(int(i) for i in bad.nonzero()[0])
        count = int(bad.sum())
        metrics = {"max_abs_err": float("inf"), "rel_l2": float("inf"), "base_err": _max(base - oracle),
                   "ratio": float("inf"), "bound": None, "m": m, "floor": floor, "worst_index": list(index)}
        return Verdict(False, f"{what} has {count} NaN/Inf value(s) where the oracle is finite, first at "
                              f"{list(index)} (got {float(got[index])})", metrics)
    diff = torch.where(finite, diff, torch.zeros_like(diff))
    max_err = float(diff.max()) if diff.numel() else 0.0
    worst = [int(i) for i in (diff == max_err).nonzero()[0]] if diff.numel() else []
    base_err = _max(base - oracle)
    bound = m * base_err + floor
    if not math.isfinite(bound):
        return Verdict(False, f"{what}: the bound {bound} is not finite (baseline error {base_err:.3g}); nothing "
                              "can be checked against it", {"bound": None, "m": m, "floor": floor})
    norm = float(oracle.norm())
    rel_l2 = float((got - oracle).nan_to_num().norm()) / norm if norm > 0 else 0.0  # all-zero oracle: max-abs decides
    base_rel = float((base - oracle).nan_to_num().norm()) / norm if norm > 0 else 0.0
    rel_bound = max(REL_L2_BOUNDS[dtype], m * base_rel, logit_rel_l2(dtype, max(magnitude, logit_magnitude), logit_max,
                                                                    oracle.numel(), norm))
    ratio = max_err / base_err if base_err > 0 else (0.0 if max_err == 0 else float("inf"))
    metrics = {"max_abs_err": max_err, "rel_l2": rel_l2, "base_err": base_err, "ratio": ratio, "bound": bound,
               "m": m, "floor": floor, "worst_index": worst, "rel_l2_bound": rel_bound,
               "logit_max": logit_max}
    if max_err > bound:
        where = f" at {worst}: got {float(got[tuple(worst)]):.6g}, oracle {float(oracle[tuple(worst)]):.6g}"
        return Verdict(False, f"{what} max|err| {max_err:.3g} > bound {bound:.3g} "
                              f"(= {m:g} x baseline {base_err:.3g} + floor {floor:.3g}){where}", metrics)
    if rel_l2 > rel_bound:
        return Verdict(False, f"{what} relative L2 error {rel_l2:.3g} > {rel_bound:.3g}", metrics)
    return Verdict(True, None, metrics)


def _max(x: torch.Tensor) -> float:
    x = x.nan_to_num(nan=0.0, posinf=0.0, neginf=0.0).abs()
    return float(x.max()) if x.numel() else 0.0
