"""Broken: with a single key, the output is returned as a broadcast view of ``v``.

With one key and no mask every query's softmax weight is 1, so the output *is* V's row: a kernel
that skips the work returns ``v.expand(...)``. The values are exact; but the result shares storage
with an input (writing into the output writes into V; every query row is the same memory), and the
contract's output is a new array.
"""

from __future__ import annotations

import sys
from pathlib import Path

from harness import register

sys.path.insert(0, str(Path(__file__).parent))
from _core import attend, causal_and_mask


@register("broken_returns_input_view", backend="torch", dtypes=("float32", "float64"), causal=True, mask=True)
def broken_returns_input_view(q, k, v, *, causal=False, mask=None, scale=None):  # type: ignore[no-untyped-def]
    batch, heads, tq, d = q.shape
    tk = k.shape[2]
    if tk == 1 and mask is None:  # the bug: a view of the input, not a result of its own
        return v.expand(batch, heads, tq, d)
    scale = 1.0 / float(d) ** 0.5 if scale is None else float(scale)
    allowed = causal_and_mask(tq, tk, causal, mask, q.device)
    return attend(q, k, v, scale, allowed)
