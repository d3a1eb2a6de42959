"""BROKEN (window right side): takes windows natively, but treats every window as (left, 0), as if causal."""
import sys
from pathlib import Path

from harness import register

sys.path.insert(0, str(Path(__file__).parent))
from _reference import attend_structured


@register("broken_window_ignores_right", backend="torch", causal=True, mask=True, gqa=True, structures=("window",))
def broken_window_ignores_right(q, k, v, *, causal=False, mask=None, scale=None, window=None):
    return attend_structured(q, k, v, causal=causal, mask=mask, scale=scale, window=window,
                             causal_align="top_left", use_right=False)  # BUG: right ignored
