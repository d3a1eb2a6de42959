"""BROKEN (finite mask fill): masked logits become -30, not -inf: invisible until logits reach the hundreds."""
import sys
from pathlib import Path

from harness import register

sys.path.insert(0, str(Path(__file__).parent))
from _reference import attend


@register("broken_finite_mask_fill", backend="torch", causal=True, mask=True, gqa=True)
def broken_finite_mask_fill(q, k, v, *, causal=False, mask=None, scale=None):
    return attend(q, k, v, causal=causal, mask=mask, scale=scale, fill=-30.0)  # BUG: a "large" negative
