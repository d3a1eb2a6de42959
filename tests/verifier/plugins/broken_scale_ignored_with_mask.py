"""BROKEN (scale dropped on the masked path): a non-default scale is honoured only when there is no mask."""
import sys
from pathlib import Path

from harness import register

sys.path.insert(0, str(Path(__file__).parent))
from _reference import attend


@register("broken_scale_ignored_with_mask", backend="torch", causal=True, mask=True, gqa=True)
def broken_scale_ignored_with_mask(q, k, v, *, causal=False, mask=None, scale=None):
    if mask is not None:
        scale = None  # BUG: the masked code path was written before scale= existed
    return attend(q, k, v, causal=causal, mask=mask, scale=scale)
