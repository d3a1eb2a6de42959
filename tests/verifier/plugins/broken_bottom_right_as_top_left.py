"""BROKEN (alignment ignored): declares bottom-right alignment natively, then always aligns top-left."""
import sys
from pathlib import Path

from harness import register

sys.path.insert(0, str(Path(__file__).parent))
from _reference import attend_structured


@register("broken_bottom_right_as_top_left", backend="torch", causal=True, mask=True, gqa=True,
          structures=("window", "bottom_right"))
def broken_bottom_right_as_top_left(q, k, v, *, causal=False, mask=None, scale=None, window=None,
                                    causal_align="top_left"):
    return attend_structured(q, k, v, causal=causal, mask=mask, scale=scale, window=window,
                             causal_align=causal_align, align=False)  # BUG: the offset Tk - Tq never applied
