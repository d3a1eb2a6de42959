"""Correct, unusual: queries in chunks of Fibonacci sizes (1, 2, 3, 5, 8, ...), each chunk against
only the keys its rows may see.

Rows are independent, so any partition of the queries is right; uneven chunks put a chunk edge
at rows 1, 3, 6, 11, 19, ... and every chunk's causal, window and bottom-right offsets must be
its own. Each chunk trims the key range to [first allowed, last allowed] of its rows.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from harness import register

sys.path.insert(0, str(Path(__file__).parent))
from _core import attend, band, repeat_kv


@register("correct_uneven_query_chunks", backend="torch", dtypes=("float32", "float64"), causal=True, mask=True,
          gqa=True, structures=("window", "bottom_right"))
def correct_uneven_query_chunks(q, k, v, *, causal=False, mask=None, scale=None, window=None,  # type: ignore[no-untyped-def]
                                causal_align="top_left"):
    batch, heads, tq, d = q.shape
    tk = k.shape[2]
    k, v = repeat_kv(q, k, v)
    scale = 1.0 / float(d) ** 0.5 if scale is None else float(scale)
    allowed = band(tq, tk, causal, window, causal_align)
    if mask is not None:
        allowed = allowed & mask
    allowed = allowed.expand(batch, heads, tq, tk)
    out = torch.zeros_like(q)
    start, a, b = 0, 1, 2
    while start < tq:
        rows = slice(start, min(start + a, tq))
        cols = allowed[:, :, rows].any(0).any(0).any(0).nonzero()
        if len(cols):
            keys = slice(int(cols[0]), int(cols[-1]) + 1)
            ok = allowed[:, :, rows, keys]
            out[:, :, rows] = attend(q[:, :, rows], k[:, :, keys], v[:, :, keys], scale, ok)
        start, a, b = rows.stop, b, a + b
    return out
