"""How an implementation's error grows with the sequence length: a forward sweep over T.

For every kernel and every dtype it declares, one case per T (B1, H1, d64, no mask; T keys and
at most 256 query rows, see ``GROWTH_QUERIES``) whose single check, ``error_growth``, records
the max error against the float64 oracle beside the error of the same formula in the same dtype
(the baseline the verify rule scales), and holds it to the rule. The report plots both against
T per dtype, so a kernel whose error grows faster than the textbook formula's with T (a running
sum kept in low precision, a rescale that drifts) shows it, long before a short case fails.
The oracle and the baseline are computed over query chunks, so a case with many query rows
never holds a (Tq, Tk) float64 matrix whole. The sweep's cases (``GROWTH_T``, ``growth_cases``)
live with the suites, which must stay free of torch: ``--help`` reads them.
"""

from __future__ import annotations

from typing import Any

import torch

from harness.case.attention import AttentionCase
from harness.contract.registry import Implementation
from harness.reference.oracle import reference_attention
from harness.reference.tensors import TORCH_DTYPES, Inputs, make_inputs, to_float64
from harness.reference.tolerance import OUTPUT_M, baseline_attention, compare
from harness.verify.checks import SEED_BASE, CheckResult, call, cell, structure_problem

CHUNK = 1024
CHECK = "error_growth"


def _chunked(fn: Any, inputs: Inputs, dtype: torch.dtype, case: AttentionCase) -> torch.Tensor:
    q, k, v = (x.to(dtype) for x in (inputs.q64, inputs.k64, inputs.v64))
    parts = [fn(q[..., i:i + CHUNK, :], k, v, scale=case.scale) for i in range(0, case.tq, CHUNK)]
    return torch.cat(parts, dim=-2).to(torch.float64)


def check_growth(impl: Implementation, case: AttentionCase) -> CheckResult:
    """The implementation's error at this T against the oracle, beside the same-dtype baseline's."""
    inputs = make_inputs(case, SEED_BASE, impl.declared.backend)
    out = call(impl, case, inputs)
    problem = structure_problem(impl, case, out, (case.batch, case.heads, case.tq, case.value_dim))
    if problem:
        return cell(CHECK, "fail", problem)
    oracle = _chunked(reference_attention, inputs, torch.float64, case)
    base = _chunked(baseline_attention, inputs, TORCH_DTYPES[case.dtype], case)
    verdict = compare(to_float64(out), oracle, base, dtype=case.dtype, m=OUTPUT_M, what=f"output at T={case.tk}")
    metrics = {**verdict.metrics, "T": case.tk}
    return cell(CHECK, "pass" if verdict.ok else "fail", verdict.reason, metrics)
