"""BROKEN (mask rank): a 3-D mask is taken as (B, Tq, Tk) and given a head axis, so (H, Tq, Tk) lands on the batch."""
import sys
from pathlib import Path

from harness import register

sys.path.insert(0, str(Path(__file__).parent))
from _reference import attend


@register("broken_mask_rank", backend="torch", causal=True, mask=True, gqa=True)
def broken_mask_rank(q, k, v, *, causal=False, mask=None, scale=None):
    if mask is not None and mask.dim() == 3:
        mask = mask[: q.shape[0], None] if mask.shape[0] >= q.shape[0] else mask[:1, None]  # BUG: (H,..) read as (B,..)
    return attend(q, k, v, causal=causal, mask=mask, scale=scale)
