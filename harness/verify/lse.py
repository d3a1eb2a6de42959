"""The log-sum-exp a kernel returns beside its output (``Conventions(returns="out_lse")``), held to the oracle's.

A kernel that returns ``(out, lse)`` (FlashAttention's ``softmax_lse``, xformers' ``lse``) hands the LSE to the
next step: split-KV decoding merges partial outputs by it, the backward pass rebuilds the softmax from it, ring
attention combines shards with it. A wrong LSE with a right output passes every output check and breaks those, so
the LSE is a check of its own: per query row, the log of the softmax's denominator over the allowed keys
(:func:`harness.reference.oracle.reference_lse`, the sink included), in the base the kernel declares (``lse_base``: a base-2
LSE is the natural one over ln 2), by the output's rule: ``max|lse - oracle| <= m * max|base - oracle| + floor``,
``base`` the same logsumexp computed in the case's dtype. The LSE is an absolute quantity (a logit moved by
``delta`` moves it by at most ``delta``), so its floor is ``FLOORS[dtype] + eps * (max|logit| + ln Tk)``, the
rounding of the logits and of the LSE itself, not the output's relative floor scaled by its magnitude. Rows
with no allowed key (and no sink) have no finite LSE: kernels return -inf or +inf there (FlashAttention 2
returns +inf so that its backward gives zeros); they are left out and counted (``lse_empty_rows``).
"""

from __future__ import annotations

import math

import torch

from harness.case.attention import AttentionCase
from harness.contract.conventions import WITH_LSE
from harness.contract.registry import Implementation
from harness.reference.oracle import reference_lse
from harness.reference.tensors import TORCH_DTYPES, make_inputs, to_float64
from harness.reference.tolerance import OUTPUT_M, Verdict, compare
from harness.verify.checks import SEED_BASE, CheckResult, call, finish, logit_max, sampled_rows

CHECK = "lse"


def checks_lse(impl: Implementation) -> bool:
    """Whether ``impl`` returns an LSE to check: it declares ``returns="out_lse"``."""
    return impl.conventions.returns == "out_lse"


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
    per_base = 1.0 / math.log(2.0) if impl.conventions.lse_base == "2" else 1.0
    dt = TORCH_DTYPES[case.dtype]
    for trial in range(trials):
        inputs = make_inputs(case, SEED_BASE + trial, impl.backend)
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
        span = (logit_max(case, inputs, rows) + math.log(max(case.tk, 1))) * per_base  # |lse| <= max|logit| + ln Tk
        verdict = compare(torch.where(finite, got, zero), torch.where(finite, oracle, zero),
                          torch.where(finite, base, zero), dtype=case.dtype, m=OUTPUT_M, what="LSE",
                          logit_max=span, magnitude=1.0)
        if verdict.reason and not verdict.reason.startswith("LSE"):
            verdict = Verdict(verdict.ok, f"LSE: {verdict.reason}", verdict.metrics)
        verdict.metrics.update(lse_base=impl.conventions.lse_base, lse_dtype=str(lse.dtype).removeprefix("torch."),
                               lse_empty_rows=int((~finite).sum()), conventions=impl.conventions.describe())
        verdicts.append((trial, verdict))
        if not verdict.ok:
            break
    return finish(CHECK, verdicts, trials)
