"""The log-sum-exp a kernel returns beside its output (``Conventions(returns="out_lse")``), held to the oracle's.

A kernel that returns ``(out, lse)`` (FlashAttention's ``softmax_lse``, xformers' ``lse``) hands the LSE to the
next step: split-KV decoding merges partial outputs by it, the backward pass rebuilds the softmax from it, ring
attention combines shards with it. A wrong LSE with a right output passes every output check and breaks those, so
the LSE is a check of its own: per query row, the log of the softmax's denominator over the allowed keys
(:func:`harness.reference.oracle.reference_lse`, the sink included), in the base the kernel declares (``lse_base``: a base-2
LSE is the natural one over ln 2), by the output's rule: ``max|lse - oracle| <= m * max|base - oracle| + floor``,
``base`` the same logsumexp computed in the case's dtype. Rows with no allowed key (and no sink) have no finite
LSE: kernels return -inf or +inf there (FlashAttention 2 returns +inf so that its backward gives zeros); they are
left out and counted (``lse_empty_rows``).

The floor, derived as the output's is (:mod:`harness.reference.tolerance`): what a correct kernel may differ by
that the one baseline draw need not show. The LSE is an absolute quantity: logits moved by ``delta_j`` move it by
``sum_j p_j delta_j`` (``p`` the softmax), at most ``max|delta|``, so the floor is absolute too (no output
magnitude), in three parts::

    floor = FLOORS[dtype] + eps * (max|logit| + ln Tk + sqrt(d) * max_row sum_j p_j * |scale| * sum_i |q_i k_ji|)

``max|logit| + ln Tk`` bounds ``|lse|``: the rounding of each logit, of the sum and of the log. The last term is
cancellation: a logit is a d-term dot product, and summed in another order (a tiled kernel's, a BLAS's, a
chunked loop's) it differs by rounding of its *terms*' magnitude, not of its value: with d = 80 and q x5, k x3 a
logit near 0 is summed from terms of total magnitude ~770, and float32 kernels differ on it by 2e-5 where
``eps * |logit|`` allows 1e-8. ``sqrt(d)`` roundings of
that size in any order (the probabilistic rounding-error bound of Higham and Mary, as
:func:`harness.verify.checks.floor_logit_factor` uses it for float64 logits), weighted by the softmax as the LSE
weighs its logits' errors. The baseline forms its logits in one order and may by chance be nearly exact on a
row (a decode step has one row, a short one few keys), so ``m * baseline`` alone does not cover it: on d = 80
with logits near 300, correct float32 kernels (an einsum, ``torch.logsumexp``, a chunked online softmax) were
up to 3.5x past the bound without this term and stay under a third of it with it. ``eps`` is the dtype's, as
everywhere in the rule: a kernel may sum a half dot product in the half type itself (most sum in float32), so in
bfloat16 and float16 the term is as loose as the dtype (a bf16 LSE at d = 80 on randn inputs is held to ~0.5).
A broken LSE (unscaled, a mask left out, the wrong base) is off by O(1) and more, past it.
"""

from __future__ import annotations

import math

import torch

from harness.case.attention import AttentionCase
from harness.contract.conventions import WITH_LSE
from harness.contract.registry import Implementation
from harness.reference.oracle import allowed_keys, allowed_rows, capped, grouped_matmul, reference_lse
from harness.reference.tensors import TORCH_DTYPES, Inputs, make_inputs, to_float64
from harness.reference.tolerance import OUTPUT_M, Verdict, compare
from harness.verify.checks import SEED_BASE, CheckResult, call, finish, logit_max, sampled_rows

CHECK = "lse"


def checks_lse(impl: Implementation) -> bool:
    """Whether ``impl`` returns an LSE to check: it declares ``returns="out_lse"``."""
    return impl.declared.conventions.returns == "out_lse"


def lse_problem(lse: object, case: AttentionCase) -> str | None:
    """What is wrong with the returned LSE's type or shape (after the declared layout), or None."""
    expected = (case.batch, case.heads, case.tq)
    if lse is None:
        return "LSE: the kernel declares returns='out_lse' but returned no (out, lse) pair"
    if not isinstance(lse, torch.Tensor):
        return f"LSE: returned {type(lse).__name__}, expected a torch.Tensor"
    if tuple(lse.shape) != expected:
        return (f"LSE shape {tuple(lse.shape)}, expected {expected} (B, H, Tq; declare lse_layout='BTH' for "
                f"(B, Tq, H))")
    if lse.dtype not in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        return f"LSE dtype {lse.dtype}, expected a floating dtype"
    return None


def check_lse(impl: Implementation, case: AttentionCase, trials: int) -> CheckResult:
    """The returned LSE against the float64 oracle's over ``trials`` fresh seeded inputs."""
    verdicts: list[tuple[int, Verdict]] = []
    per_base = 1.0 / math.log(2.0) if impl.declared.conventions.lse_base == "2" else 1.0
    dt = TORCH_DTYPES[case.dtype]
    for trial in range(trials):
        inputs = make_inputs(case, SEED_BASE + trial, impl.declared.backend)
        returned = call(impl, case, inputs, **{WITH_LSE: True})
        lse = returned[1] if isinstance(returned, tuple) else None
        problem = lse_problem(lse, case)
        if problem:
            verdicts.append((trial, Verdict(False, problem, {})))
            break
        assert isinstance(lse, torch.Tensor)
        rows = sampled_rows(case, trial)
        kwargs = inputs.oracle_kwargs(case)
        oracle = reference_lse(inputs.q64, inputs.k64, **kwargs, rows=rows) * per_base
        base = reference_lse(inputs.q64.to(dt), inputs.k64.to(dt), **kwargs, rows=rows, dtype=dt)
        base = base.to(torch.float64) * per_base
        got = to_float64(lse) if rows is None else to_float64(lse)[:, :, rows]
        finite = torch.isfinite(oracle)
        zero = torch.zeros((), dtype=torch.float64)
        cancelled = math.sqrt(case.d) * dot_terms(case, inputs, rows, oracle / per_base)
        span = (logit_max(case, inputs, rows) + math.log(max(case.tk, 1)) + cancelled) * per_base
        verdict = compare(torch.where(finite, got, zero), torch.where(finite, oracle, zero),
                          torch.where(finite, base, zero), dtype=case.dtype, m=OUTPUT_M, what="LSE",
                          logit_max=span, magnitude=1.0)
        if verdict.reason and not verdict.reason.startswith("LSE"):
            verdict = Verdict(verdict.ok, f"LSE: {verdict.reason}", verdict.metrics)
        verdict.metrics.update(lse_base=impl.declared.conventions.lse_base, lse_dtype=str(lse.dtype).removeprefix("torch."),
                               lse_empty_rows=int((~finite).sum()), lse_dot_terms=cancelled * per_base,
                               conventions=impl.declared.conventions.describe())
        verdicts.append((trial, verdict))
        if not verdict.ok:
            break
    return finish(CHECK, verdicts, trials)


def dot_terms(case: AttentionCase, inputs: Inputs, rows: torch.Tensor | None, lse: torch.Tensor) -> float:
    """max over query rows (of ``rows``, when given) of ``sum_j p_j * |scale| * sum_i |q_i k_ji|``: the magnitude
    of the terms each row's logits are summed from, weighted by the row's softmax ``p_j = exp(logit_j - lse)``
    (``lse`` the float64 oracle's, natural log, the sink in its denominator); 0 for a row with no allowed key."""
    kwargs = inputs.oracle_kwargs(case)
    k = inputs.k64  # GQA: each kv head read once by its group's query heads (grouped_matmul), never copied
    q = inputs.q64 if rows is None else inputs.q64[:, :, rows]
    scale = abs(case.effective_scale)
    logits = capped(grouped_matmul(q, k.transpose(-1, -2)) * case.effective_scale, case.softcap)
    bias = kwargs["bias"]
    if bias is not None:
        logits = logits + (bias if rows is None else bias.expand(*bias.shape[:-2], case.tq, case.tk)[..., rows, :])
    where = dict(causal=case.causal, mask=kwargs["mask"], **case.structure_kwargs())
    allowed = allowed_keys(case.tq, case.tk, **where) if rows is None else allowed_rows(rows, case.tq, case.tk, **where)
    weights = torch.exp(logits - lse[..., None])
    if allowed is not None:
        weights = weights.masked_fill(~allowed, 0.0)
    terms = grouped_matmul(q.abs(), k.abs().transpose(-1, -2)) * scale
    weighted = (weights * terms).nan_to_num(nan=0.0, posinf=0.0).sum(-1)
    return float(weighted.max()) if weighted.numel() else 0.0
