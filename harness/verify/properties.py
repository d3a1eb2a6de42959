"""Properties every correct attention has, checked without trusting the oracle's exact numbers.

- ``permutation``: permuting the rows of K and V together leaves the output unchanged
  (no mask, not causal, no bias: otherwise positions matter).
- ``convex_hull``: every output element lies within the per-column [min, max] of the V rows
  its query may attend to (the output is a convex combination of them); a row with no
  allowed key is zero; a constant V gives that constant.
- ``slices``: one batch element, and one query head (with its kv head), computed alone
  equal that slice of the batched result.
- ``block_sizes``: an implementation that declares ``block_q=(...), block_k=(...)`` gives a result within the rule for several block sizes.

Tolerances come from the same rule as the output check (:mod:`harness.reference.tolerance`): a
difference between two calls of the implementation may be the sum of two allowed errors,
``2 * (m * baseline error + floor)``. Properties run on one seeded trial, and only on
cases small enough (B*H*Tq*Tk <= PROPERTY_MAX_SCORES) to keep the suites fast.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch

from harness.case.attention import AttentionCase
from harness.contract.registry import Implementation
from harness.reference.oracle import allowed_keys, expand_kv
from harness.reference.tensors import Inputs, make_inputs, to_float64
from harness.reference.tolerance import OUTPUT_M, compare, floor_for
from harness.verify.checks import (
    FAIL,
    PASS,
    SEED_BASE,
    CheckResult,
    ContractViolation,
    as_contract_rows,
    call,
    cell,
    exponent_max,
    large_case,
    oracle_and_base,
    structure_problem,
)

PROPERTY_MAX_SCORES = 300_000
HULL_MAX_ELEMENTS = 3_000_000
"""convex_hull materialises (B, H, chunk, Tk, d) float64 temporaries: only below B*H*Tq*Tk*d of this."""
PropertyFn = Callable[[Implementation, AttentionCase], CheckResult]


def applicable_properties(impl: Implementation, case: AttentionCase) -> list[tuple[str, PropertyFn]]:
    """The properties that make sense for this case, in a stable order."""
    from harness.verify.stateful import stateful

    if case.grad or large_case(case):
        return []  # a large case is checked for its output; its state across calls on the many small ones
    from harness.verify.restructured import applies, restructured

    props: list[tuple[str, PropertyFn]] = [("stateful", stateful)]
    if applies(case):
        props.append(("restructured", restructured))
    if case.pairwise or case.batch * case.heads * case.tq * case.tk > PROPERTY_MAX_SCORES:
        return props
    if _keys_unordered(case):
        props.append(("permutation", permutation))
    if case.page_size is not None:  # the properties below pass K and V of their own, contiguous
        return props
    if _hull_holds(case):
        props.append(("convex_hull", convex_hull))
    if _sliceable(case):
        props.append(("slices", slices))
    if impl.declared.block_q and impl.declared.block_k:
        props.append(("block_sizes", block_sizes))
    return props


def _keys_unordered(case: AttentionCase) -> bool:
    """Whether permuting the keys (with their values) may leave the output unchanged: positions matter under a
    mask, causality, a bias or a structure, and self-attention cannot permute K apart from Q."""
    return (case.mask == "none" and not case.causal and case.bias == "none" and not case.self_attention
            and case.tk > 1 and not case.structures)


def _hull_holds(case: AttentionCase) -> bool:
    """Whether the output must lie in the hull of V's allowed rows and the check fits in memory (a sink takes a
    share of each row's weight and gives no value: the output is inside the hull of V and 0)."""
    return not case.self_attention and not case.sinks \
        and case.batch * case.heads * case.tq * case.tk * case.d <= HULL_MAX_ELEMENTS


def _sliceable(case: AttentionCase) -> bool:
    """Whether the case has a batch element or a head to compute alone: batch elements not with cache lengths
    (given per batch element), and nothing with sinks (given per head)."""
    return ((case.batch > 1 and case.cache_seqlens is None) or case.heads > 1) and not case.sinks


def _inputs(impl: Implementation, case: AttentionCase) -> Inputs:
    return make_inputs(case, SEED_BASE, impl.declared.backend)


def _tolerance(case: AttentionCase, inputs: Inputs) -> float:
    """The output rule's bound on these inputs: m * baseline error + floor."""
    oracle, base = oracle_and_base(case, inputs)
    floor = floor_for(case.dtype, float(oracle.abs().max()), exponent_max(case, inputs))
    return OUTPUT_M * _base_err(base, oracle) + floor


def _base_err(base: torch.Tensor, oracle: torch.Tensor) -> float:
    """max|base - oracle| over the elements where the baseline is finite: a baseline that overflowed (float16 Q K^T
    past 65,504 with ``inputs="huge"``) is no yardstick there, and the floor alone bounds them, as in the rule."""
    err = (base - oracle).nan_to_num(nan=0.0, posinf=0.0, neginf=0.0).abs()
    return float(err.max()) if err.numel() else 0.0


def _out(impl: Implementation, case: AttentionCase, inputs: Inputs, shape: tuple[int, ...] | None = None,
         **kw: Any) -> torch.Tensor:
    out = call(impl, case, inputs, **{k: v for k, v in kw.items() if k in ("q", "k", "v")},
               **{k: v for k, v in kw.items() if k not in ("q", "k", "v")})
    shape = shape or (case.batch, case.heads, case.tq, case.value_dim)
    problem = structure_problem(impl, case, out, shape)
    if problem:
        raise ContractViolation(problem)
    full = shape == (case.batch, case.heads, case.tq, case.value_dim)
    return to_float64(as_contract_rows(impl, case, inputs, out) if full else out)


def _gap(a: torch.Tensor, b: torch.Tensor) -> float:
    """max|a - b|, infinite where either holds a NaN or an infinity: two all-NaN outputs do not agree."""
    diff = (a - b).abs()
    if not (torch.isfinite(a).all() and torch.isfinite(b).all()):
        return float("inf")
    return float(diff.max()) if diff.numel() else 0.0


def _verdict(name: str, diff: float, bound: float, what: str, extra: Mapping[str, object] | None = None) -> CheckResult:
    metrics = {"max_abs_err": diff, "bound": bound, **(extra or {})}
    if diff <= bound:
        return cell(name, PASS, None, metrics)
    return cell(name, FAIL, f"{what}: max|diff| {diff:.3g} > bound {bound:.3g}", metrics)


def permutation(impl: Implementation, case: AttentionCase) -> CheckResult:
    inputs = _inputs(impl, case)
    out = _out(impl, case, inputs)
    perm = torch.randperm(case.tk, generator=torch.Generator().manual_seed(SEED_BASE + 1))
    index: Any = perm if impl.declared.backend == "torch" else perm.numpy()
    kp, vp = inputs.k[:, :, index], inputs.v[:, :, index]
    scales: dict[str, Any] = {}
    k_scale, v_scale = inputs.k_scale, inputs.v_scale
    if case.kv_scales == "token" and k_scale is not None and v_scale is not None:  # they move with their keys
        scales = {"k_scale": k_scale[:, :, index], "v_scale": v_scale[:, :, index]}
    permuted = _out(impl, case, inputs, k=kp, v=vp, **scales)
    diff = _gap(permuted, out)
    return _verdict("property:permutation", diff, 2 * _tolerance(case, inputs),
                    "permuting the rows of K and V together changed the output")


def convex_hull(impl: Implementation, case: AttentionCase) -> CheckResult:
    """Within the hull of the attendable V rows; then with a constant V, exactly that constant."""
    inputs = _inputs(impl, case)
    out = _out(impl, case, inputs)
    tol = _tolerance(case, inputs)
    allowed = allowed_keys(case.tq, case.tk, causal=case.causal, mask=inputs.mask64, **case.structure_kwargs())
    b, h, tq, tk = case.batch, case.heads, case.tq, case.tk
    if allowed is None:
        worst = _hull_excess_unmasked(inputs, out, h)
    else:
        worst = _hull_excess(inputs, out, allowed.expand(b, h, tq, tk), h)
    if worst > tol:
        return _verdict("property:convex_hull", worst, tol,
                        "an output element lies outside [min, max] of the V rows its query may attend to")
    const = 0.75  # exact in every dtype, FP8 too
    v_const: Any = torch.full_like(inputs.v, const) if impl.declared.backend == "torch" else np.full_like(inputs.v, const)
    inputs.v64 = torch.full_like(inputs.v64, const)
    ones: dict[str, Any] = {} if inputs.v_scale is None else {"v_scale": torch.ones_like(inputs.v_scale)}  # FP8: 0.75
    got = _out(impl, case, inputs, v=v_const, **ones)
    oracle, base = oracle_and_base(case, inputs)
    bound = OUTPUT_M * _base_err(base, oracle) + floor_for(case.dtype, const, exponent_max(case, inputs))
    return _verdict("property:convex_hull", float((got - oracle).abs().max()), bound,
                    f"with V = {const} everywhere the output is not {const} (0 on rows with no key)",
                    {"hull_excess": worst})


def _hull_excess_unmasked(inputs: Inputs, out: torch.Tensor, heads: int) -> float:
    """The hull excess when every query may attend every key: one [min, max] per (batch, head) column,
    O(Tk x d) instead of the masked form's O(Tq x Tk x d)."""
    v = inputs.v64  # per kv head, then copied to its query heads: (B, Hkv, 1, d), never the whole of V
    lo, hi = expand_kv(v.amin(-2, keepdim=True), heads), expand_kv(v.amax(-2, keepdim=True), heads)
    return max(float(torch.clamp(lo - out, min=0).max()), float(torch.clamp(out - hi, min=0).max()))


def _hull_excess(inputs: Inputs, out: torch.Tensor, allowed: torch.Tensor, heads: int) -> float:
    """How far any output lies outside [min, max] of the V rows its query may attend (0 on rows with none)."""
    v = expand_kv(inputs.v64, heads)[:, :, None]  # (B, H, 1, Tk, d)
    worst = 0.0
    for q0 in range(0, allowed.shape[-2], 64):  # query chunks keep the (.., Tq, Tk, d) temporaries small
        rows = allowed[:, :, q0:q0 + 64, :, None]
        lo = torch.where(rows, v, torch.tensor(float("inf"), dtype=torch.float64)).amin(-2)
        hi = torch.where(rows, v, torch.tensor(float("-inf"), dtype=torch.float64)).amax(-2)
        empty = ~rows.any(-2)
        lo, hi = torch.where(empty, 0.0, lo), torch.where(empty, 0.0, hi)
        o = out[:, :, q0:q0 + 64]
        worst = max(worst, float(torch.clamp(lo - o, min=0).max()), float(torch.clamp(o - hi, min=0).max()))
    return worst


def _slice_mask(x: Any, dim: int, index: int, full: tuple[int, ...]) -> Any:
    """Batch element or head ``index`` of a mask or bias of any broadcastable rank, as a 4-D view."""
    if x is None:
        return None
    x = x.expand(full) if isinstance(x, torch.Tensor) else np.broadcast_to(x, full)
    return x[(slice(None),) * dim + (slice(index, index + 1),)]


def slices(impl: Implementation, case: AttentionCase) -> CheckResult:
    inputs = _inputs(impl, case)
    out = _out(impl, case, inputs)
    bound = 2 * _tolerance(case, inputs)
    worst, where = 0.0, ""
    full = (case.batch, case.heads, case.tq, case.tk)
    if case.batch > 1 and case.cache_seqlens is None:  # cache lengths are per batch element: heads only
        i = case.batch - 1
        part = case.with_(batch=1)
        sub = Inputs(inputs.q[i:i + 1], inputs.k[i:i + 1], inputs.v[i:i + 1], _slice_mask(inputs.mask, 0, i, full),
                     inputs.q64, inputs.k64, inputs.v64, None, inputs.bias, None)
        sub.k_scale, sub.v_scale = _sliced_scales(case, inputs, 0, i)
        alone = _out(impl, part, sub)
        worst, where = _gap(alone, out[i:i + 1]), f"batch element {i}"
    if case.heads > 1:
        h = case.heads - 1
        g = h // (case.heads // case.kv_heads)
        part = case.with_(heads=1, kv_heads=1, kv_scale_values=None)  # the scales come sliced from the inputs
        sub = Inputs(inputs.q[:, h:h + 1], inputs.k[:, g:g + 1], inputs.v[:, g:g + 1], _slice_mask(inputs.mask, 1, h, full),
                     inputs.q64, inputs.k64, inputs.v64, None, _slice_mask(inputs.bias, 1, h, full), None)
        sub.k_scale, sub.v_scale = _sliced_scales(case, inputs, 1, g)
        alone = _out(impl, part, sub)
        diff = _gap(alone, out[:, h:h + 1])
        if diff > worst or diff != diff:
            worst, where = diff, f"query head {h} (kv head {g})"
    return _verdict("property:slices", worst, bound, f"{where} computed alone differs from its slice of the batch")


def _sliced_scales(case: AttentionCase, inputs: Inputs, dim: int, index: int) -> tuple[Any, Any]:
    """An FP8 cache's (k_scale, v_scale) for batch element (``dim`` 0) or kv head (``dim`` 1) ``index`` alone: a
    per-tensor scale whole, a per-head one's entry (by head only), a per-token one's slice; (None, None) otherwise."""
    k_scale, v_scale = inputs.k_scale, inputs.v_scale
    if k_scale is None or v_scale is None:
        return None, None
    if case.kv_scales == "tensor" or (case.kv_scales == "head" and dim == 0):
        return k_scale, v_scale
    at = (slice(None),) * (dim if case.kv_scales == "token" else 0) + (slice(index, index + 1),)
    return k_scale[at], v_scale[at]


def block_sizes(impl: Implementation, case: AttentionCase) -> CheckResult:
    """Every corner of the declared block sizes, each held to the output rule."""
    inputs = _inputs(impl, case)
    oracle, base = oracle_and_base(case, inputs)
    bq, bk = impl.declared.block_q, impl.declared.block_k
    combos = sorted(set(itertools.product({min(bq), max(bq)}, {min(bk), max(bk)})))
    outs = {}
    for q_block, k_block in combos:
        got = _out(impl, case, inputs, block_q=q_block, block_k=k_block)
        verdict = compare(got, oracle, base, dtype=case.dtype, m=OUTPUT_M, logit_max=exponent_max(case, inputs))
        if not verdict.ok:
            return cell("property:block_sizes", FAIL, f"block_q={q_block}, block_k={k_block}: {verdict.reason}",
                        {**verdict.metrics, "block_q": q_block, "block_k": k_block})
        outs[(q_block, k_block)] = got
    spread = max(float((a - b).abs().max()) for a, b in itertools.combinations(outs.values(), 2)) if len(outs) > 1 else 0.0
    return cell("property:block_sizes", PASS, None, {"blocks": [list(c) for c in combos], "max_pairwise_diff": spread})
