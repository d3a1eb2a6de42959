"""The pass rule, where verify's modules have always imported it from: see :mod:`harness.tolerance`.

The rule lives below both runners (bench checks its timed outputs with it too, and bench may not
import verify); this module re-exports it unchanged.
"""

from harness.tolerance import (
    EPS,
    FLOORS,
    GRAD_M,
    OUTPUT_M,
    REL_L2_BOUNDS,
    Verdict,
    baseline_attention,
    baseline_rows,
    compare,
    describe_rule,
    floor_for,
    logit_rel_l2,
    rule_config,
)

__all__ = ["EPS", "FLOORS", "GRAD_M", "OUTPUT_M", "REL_L2_BOUNDS", "Verdict", "baseline_attention", "baseline_rows",
           "compare", "describe_rule", "floor_for", "logit_rel_l2", "rule_config"]
