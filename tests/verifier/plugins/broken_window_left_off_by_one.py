"""BROKEN (window left edge): takes windows natively, but query i's window starts at i - left + 1, one key short."""
import sys
from pathlib import Path

from harness import register

sys.path.insert(0, str(Path(__file__).parent))
from _reference import attend_structured


@register("broken_window_left_off_by_one", backend="torch", causal=True, mask=True, gqa=True,
          structures=("window", "bottom_right"))
def broken_window_left_off_by_one(q, k, v, *, causal=False, mask=None, scale=None, window=None,
                                  causal_align="top_left"):
    return attend_structured(q, k, v, causal=causal, mask=mask, scale=scale, window=window,
                             causal_align=causal_align, left_shift=1)  # BUG: i - left + 1
