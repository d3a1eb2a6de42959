"""Broken: under ragged cache lengths, a sliding window is placed from the cache's capacity
instead of each sequence's length.

Causality uses each element's length ``L_b`` and is right, as is every cache without a window and
every element whose cache is full (``L_b = Tk``). With a window (Mistral's sliding-window decode) and
bottom-right alignment, the window's edges are measured from ``Tk - Tq`` instead of ``L_b - Tq``: an
element with a shorter cache loses the keys at the start of its window.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from harness import register

sys.path.insert(0, str(Path(__file__).parent))
from _core import attend, cached


@register("broken_cache_window_capacity", backend="torch", dtypes=("float32",), causal=True, gqa=True,
          structures=("window", "bottom_right", "cache_seqlens"))
def broken_cache_window_capacity(q, k, v, *, causal=False, mask=None, scale=None, window=None,  # type: ignore[no-untyped-def]
                                 causal_align="top_left", cache_seqlens=None):
    tq, tk, d = q.shape[2], k.shape[2], q.shape[3]
    scale = 1.0 / float(d) ** 0.5 if scale is None else float(scale)
    out = torch.zeros_like(q)
    i = torch.arange(tq)[:, None]
    for b, length, kb, vb in cached(q, k, v, cache_seqlens):
        j = torch.arange(length)[None, :]
        bottom = causal_align == "bottom_right"
        ok = torch.ones(tq, length, dtype=torch.bool)
        if causal:
            ok &= j - (length - tq if bottom else 0) <= i
        if window is not None:
            wj = j - (tk - tq if bottom else 0)  # the bug: the capacity, not this sequence's length
            ok &= (wj >= i - window[0]) & (wj <= i + window[1])
        out[b] = attend(q[b], kb, vb, scale, ok)
    return out
