"""Broken: the decode step advances ``cache_seqlens`` in place after attending.

Its output is right. But it confuses two APIs: FlashAttention's ``flash_attn_with_kvcache`` appends
the new keys to the cache itself, and a serving loop built on that convention moves the lengths on
after every step. This kernel appends nothing, yet adds Tq to the caller's length tensor: the
caller's next step reads Tq keys that were never written. A call writes only what it allocated.
"""

from __future__ import annotations

import torch

from harness import register


def _allowed(tq: int, tk: int, causal: bool, window, align: str) -> torch.Tensor:  # type: ignore[no-untyped-def]
    i = torch.arange(tq)[:, None]
    j = torch.arange(tk)[None, :] - ((tk - tq) if align == "bottom_right" else 0)
    ok = torch.ones(tq, tk, dtype=torch.bool)
    if causal:
        ok &= j <= i
    if window is not None:
        ok &= (j >= i - window[0]) & (j <= i + window[1])
    return ok


@register("broken_advances_cache_seqlens", backend="torch", dtypes=("float32",), causal=True, gqa=True,
          structures=("window", "bottom_right", "cache_seqlens"))
def broken_advances_cache_seqlens(q, k, v, *, causal=False, mask=None, scale=None, window=None,  # type: ignore[no-untyped-def]
                                  causal_align="top_left", cache_seqlens=None):
    batch, heads, tq, d = q.shape
    tk = k.shape[2]
    g = heads // k.shape[1]
    scale = 1.0 / float(d) ** 0.5 if scale is None else float(scale)
    out = torch.zeros_like(q)
    for b in range(batch):
        length = tk if cache_seqlens is None else int(cache_seqlens[b])
        kb = k[b, :, :length].repeat_interleave(g, 0)
        vb = v[b, :, :length].repeat_interleave(g, 0)
        ok = _allowed(tq, length, causal, window, causal_align)
        s = ((q[b] @ kb.transpose(-1, -2)) * scale).masked_fill(~ok, float("-inf"))
        p = torch.softmax(s, -1)
        out[b] = torch.where(ok.any(-1, keepdim=True), p, torch.zeros((), dtype=p.dtype)) @ vb
    if cache_seqlens is not None:
        cache_seqlens += tq  # the bug: the caller's lengths, moved on for keys nobody appended
    return out
