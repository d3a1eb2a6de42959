"""Broken: under ragged cache lengths, a sliding window is placed from the cache's capacity
instead of each sequence's length.

Causality uses each element's length ``L_b`` and is right, as is every cache without a window and
every element whose cache is full (``L_b = Tk``). With a window (Mistral's sliding-window decode) and
bottom-right alignment, the window's edges are measured from ``Tk - Tq`` instead of ``L_b - Tq``: an
element with a shorter cache loses the keys at the start of its window.
"""

from __future__ import annotations

import torch

from harness import register


@register("broken_cache_window_capacity", backend="torch", dtypes=("float32",), causal=True, gqa=True,
          structures=("window", "bottom_right", "cache_seqlens"))
def broken_cache_window_capacity(q, k, v, *, causal=False, mask=None, scale=None, window=None,  # type: ignore[no-untyped-def]
                                 causal_align="top_left", cache_seqlens=None):
    batch, heads, tq, d = q.shape
    tk = k.shape[2]
    g = heads // k.shape[1]
    scale = 1.0 / float(d) ** 0.5 if scale is None else float(scale)
    out = torch.zeros_like(q)
    i = torch.arange(tq)[:, None]
    for b in range(batch):
        length = tk if cache_seqlens is None else int(cache_seqlens[b])
        j = torch.arange(length)[None, :]
        bottom = causal_align == "bottom_right"
        ok = torch.ones(tq, length, dtype=torch.bool)
        if causal:
            ok &= j - (length - tq if bottom else 0) <= i
        if window is not None:
            wj = j - (tk - tq if bottom else 0)  # the bug: the capacity, not this sequence's length
            ok &= (wj >= i - window[0]) & (wj <= i + window[1])
        kb = k[b, :, :length].repeat_interleave(g, 0)
        vb = v[b, :, :length].repeat_interleave(g, 0)
        s = ((q[b] @ kb.transpose(-1, -2)) * scale).masked_fill(~ok, float("-inf"))
        p = torch.softmax(s, -1)
        out[b] = torch.where(ok.any(-1, keepdim=True), p, torch.zeros((), dtype=p.dtype)) @ vb
    return out
