"""Correct, unusual: split-KV decode with pieces of uneven, prime sizes (13, 29, 61, then 97s),
merged by log-sum-exp, straight from the page pool.

Each piece ends at a boundary unrelated to the page size, so one piece gathers from several pages
and a page is split between pieces; the merge is exact whatever the cut. Takes windows, bottom-right
alignment, ragged lengths and pages natively.
"""

from __future__ import annotations

import torch

from harness import register

SIZES = (13, 29, 61)
REST = 97


def _cuts(length: int) -> list[tuple[int, int]]:
    cuts, start, n = [], 0, 0
    while start < length:
        size = SIZES[n] if n < len(SIZES) else REST
        cuts.append((start, min(start + size, length)))
        start, n = start + size, n + 1
    return cuts


@register("correct_splitkv_uneven_pages", backend="torch", dtypes=("float32", "float64"), causal=True, gqa=True,
          structures=("window", "bottom_right", "cache_seqlens", "paged"))
def correct_splitkv_uneven_pages(q, k, v, *, causal=False, mask=None, scale=None, window=None,  # type: ignore[no-untyped-def]
                                 causal_align="top_left", cache_seqlens=None, block_table=None):
    batch, heads, tq, d = q.shape
    g = heads // k.shape[1]
    tk = k.shape[2] * block_table.shape[1] if block_table is not None else k.shape[2]
    scale = 1.0 / float(d) ** 0.5 if scale is None else float(scale)
    out = torch.zeros_like(q)
    for b in range(batch):
        length = tk if cache_seqlens is None else int(cache_seqlens[b])
        i = torch.arange(tq)[:, None] + (length - tq if causal_align == "bottom_right" else 0)
        outs, lses = [], []
        for start, stop in _cuts(length):
            keys = torch.arange(start, stop)
            if block_table is None:
                kb, vb = k[b, :, start:stop], v[b, :, start:stop]
            else:
                page = k.shape[2]
                pages = block_table[b].long()[keys // page]
                kb, vb = k[pages, :, keys % page].transpose(0, 1), v[pages, :, keys % page].transpose(0, 1)
            ok = torch.ones(tq, stop - start, dtype=torch.bool)
            if causal:
                ok &= keys[None, :] <= i
            if window is not None:
                ok &= (keys[None, :] >= i - window[0]) & (keys[None, :] <= i + window[1])
            s = ((q[b] @ kb.repeat_interleave(g, 0).transpose(-1, -2)) * scale).masked_fill(~ok, float("-inf"))
            lse = torch.logsumexp(s, -1, keepdim=True)
            outs.append(torch.exp(s - torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse))) @ vb.repeat_interleave(g, 0))
            lses.append(lse)
        if not outs:
            continue
        lse_all = torch.stack(lses)
        top = lse_all.amax(0)
        top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
        weights = torch.exp(lse_all - top)
        merged = sum(w * o for w, o in zip(weights, outs))
        total = weights.sum(0)
        out[b] = merged / torch.where(total > 0, total, torch.ones_like(total))
    return out
