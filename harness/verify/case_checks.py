"""Every check of one kernel case, in order: the output, the gradients (grad cases), the properties (and, for an
FP8 cache, the quantisation's own error: reported, never failed).

Apart from :mod:`harness.verify.checks` because the properties build on those checks: the
composition sits above both, and neither imports the other's user.
"""

from __future__ import annotations

import functools
from dataclasses import replace

from harness.case.attention import AttentionCase
from harness.case.quantized import is_fp8
from harness.contract.registry import Implementation
from harness.verify.checks import CheckResult, check_grad, check_output, guarded, large_case
from harness.verify.growth import CHECK, check_growth
from harness.verify.lse import CHECK as LSE_CHECK
from harness.verify.lse import check_lse, checks_lse
from harness.verify.properties import applicable_properties
from harness.verify.quantisation import CHECK as QUANTISATION_CHECK
from harness.verify.quantisation import check_quantisation


def check_kernel_case(impl: Implementation, case: AttentionCase, trials: int) -> list[CheckResult]:
    """Every check that applies to ``case``: output, the returned LSE (kernels declaring one), grad (grad cases),
    then the properties."""
    if case.growth:  # a point of the error-growth sweep: that one measurement, nothing else
        return [guarded(CHECK, lambda: check_growth(impl, case))]
    # a covering-array row is worth its combination, not its draws; an edge of size, its size
    trials = 1 if case.pairwise or large_case(case) else trials
    results = [guarded("output", lambda: check_output(impl, case, trials))]
    if checks_lse(impl):  # a returned log-sum-exp is part of the answer (Conventions(returns="out_lse"))
        results.append(guarded(LSE_CHECK, lambda: check_lse(impl, case, trials)))
    if is_fp8(case):  # what the FP8 cache costs by itself: a measurement beside the kernel's, never a failure
        results.append(guarded(QUANTISATION_CHECK, lambda: check_quantisation(case)))
    if case.grad:
        results.append(guarded("grad", lambda: check_grad(impl, case, trials)))
    for name, fn in applicable_properties(impl, case):
        results.append(guarded(f"property:{name}", functools.partial(fn, impl, case)))
    if impl.declared.conventions.is_contract:
        return results
    assumed = impl.declared.conventions.describe()  # every verdict says which declared conventions it assumed
    return [r if "conventions" in r.metrics else replace(r, metrics={**r.metrics, "conventions": assumed})
            for r in results]
