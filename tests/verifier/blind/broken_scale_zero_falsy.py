"""Broken: ``scale = scale or 1/sqrt(d)``: a scale of 0 is taken for "not given".

The Python idiom treats 0.0 like None. Every positive or negative scale is right, and so is the
default. ``scale=0`` (uniform attention: every allowed key weighs the same, the output is the mean
of the allowed V rows; used to ablate attention and in some linear-attention baselines) silently
becomes 1/sqrt(d).
"""

from __future__ import annotations

import sys
from pathlib import Path

from harness import register

sys.path.insert(0, str(Path(__file__).parent))
from _core import attend, causal_and_mask, repeat_kv


@register("broken_scale_zero_falsy", backend="torch", dtypes=("float32", "float64"), causal=True, mask=True, gqa=True)
def broken_scale_zero_falsy(q, k, v, *, causal=False, mask=None, scale=None):  # type: ignore[no-untyped-def]
    tq, tk, d = q.shape[2], k.shape[2], q.shape[3]
    k, v = repeat_kv(q, k, v)
    scale = scale or 1.0 / float(d) ** 0.5  # the bug
    allowed = causal_and_mask(tq, tk, causal, mask)
    return attend(q, k, v, scale, allowed)
