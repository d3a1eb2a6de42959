"""Broken: the paged-cache path never receives the caller's scale.

Contiguous caches go through one entry point that honours ``scale=``; a paged cache goes through a
second (the page-gather kernel) whose launcher was written without the argument and uses
``1/sqrt(d)``. Right for every paged call at the default scale, wrong for a paged cache with any
other scale (Gemma-2's 1/sqrt(query_pre_attn_scalar), a softcapped or temperature-scaled model).
"""

from __future__ import annotations

import torch

from harness import register


def _decode(q, k, v, scale, causal, align, lengths, block_table):  # type: ignore[no-untyped-def]
    batch, heads, tq, d = q.shape
    g = heads // k.shape[1]
    out = torch.zeros_like(q)
    for b in range(batch):
        length = int(lengths[b])
        if block_table is None:
            kb, vb = k[b, :, :length], v[b, :, :length]
        else:
            page = k.shape[2]
            keys = torch.arange(length)
            pages = block_table[b].long()[keys // page]
            kb, vb = k[pages, :, keys % page].transpose(0, 1), v[pages, :, keys % page].transpose(0, 1)
        kb, vb = kb.repeat_interleave(g, 0), vb.repeat_interleave(g, 0)
        ok = torch.ones(tq, length, dtype=torch.bool)
        if causal:
            shift = length - tq if align == "bottom_right" else 0
            ok &= torch.arange(length)[None, :] - shift <= torch.arange(tq)[:, None]
        s = ((q[b] @ kb.transpose(-1, -2)) * scale).masked_fill(~ok, float("-inf"))
        p = torch.softmax(s, -1)
        out[b] = torch.where(ok.any(-1, keepdim=True), p, torch.zeros((), dtype=p.dtype)) @ vb
    return out


@register("broken_paged_default_scale", backend="torch", dtypes=("float32",), causal=True, gqa=True,
          structures=("bottom_right", "cache_seqlens", "paged"))
def broken_paged_default_scale(q, k, v, *, causal=False, mask=None, scale=None, causal_align="top_left",  # type: ignore[no-untyped-def]
                               cache_seqlens=None, block_table=None):
    d = q.shape[3]
    default = 1.0 / float(d) ** 0.5
    if block_table is not None:
        scale = default  # the bug: the paged launcher has no scale parameter
    scale = default if scale is None else float(scale)
    lengths = [k.shape[2]] * q.shape[0] if cache_seqlens is None else cache_seqlens.tolist()
    return _decode(q, k, v, scale, causal, causal_align, lengths, block_table)
