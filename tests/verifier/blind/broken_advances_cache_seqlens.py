"""Broken: the decode step advances ``cache_seqlens`` in place after attending.

Its output is right. But it confuses two APIs: FlashAttention's ``flash_attn_with_kvcache`` appends
the new keys to the cache itself, and a serving loop built on that convention moves the lengths on
after every step. This kernel appends nothing, yet adds Tq to the caller's length tensor: the
caller's next step reads Tq keys that were never written. A call writes only what it allocated.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from harness import register

sys.path.insert(0, str(Path(__file__).parent))
from _core import attend, band, cached


@register("broken_advances_cache_seqlens", backend="torch", dtypes=("float32",), causal=True, gqa=True,
          structures=("window", "bottom_right", "cache_seqlens"))
def broken_advances_cache_seqlens(q, k, v, *, causal=False, mask=None, scale=None, window=None,  # type: ignore[no-untyped-def]
                                  causal_align="top_left", cache_seqlens=None):
    tq, d = q.shape[2], q.shape[3]
    scale = 1.0 / float(d) ** 0.5 if scale is None else float(scale)
    out = torch.zeros_like(q)
    for b, length, kb, vb in cached(q, k, v, cache_seqlens):
        out[b] = attend(q[b], kb, vb, scale, band(tq, length, causal, window, causal_align))
    if cache_seqlens is not None:
        cache_seqlens += tq  # the bug: the caller's lengths, moved on for keys nobody appended
    return out
