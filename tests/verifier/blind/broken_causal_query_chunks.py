"""Broken: past 2,048 queries, queries are processed in chunks of 1,024 and each chunk's causal
mask is built as if the chunk started at query 0.

Long prefills are split along the queries to bound the T x T scores. The first chunk is right; in
every later chunk query ``c * 1024 + i`` is allowed keys ``j <= i`` instead of ``j <= c * 1024 + i``,
so it loses most of its past. Up to 2,048 queries the whole matrix is formed at once and is right.
"""

from __future__ import annotations

import torch

from harness import register

WHOLE = 2048
CHUNK = 1024


def _attend(q, k, v, scale, allowed):  # type: ignore[no-untyped-def]
    s = (q @ k.transpose(-1, -2)) * scale
    if allowed is None:
        return torch.softmax(s, -1) @ v
    p = torch.softmax(s.masked_fill(~allowed, float("-inf")), -1)
    return torch.where(allowed.any(-1, keepdim=True), p, torch.zeros((), dtype=p.dtype)) @ v


@register("broken_causal_query_chunks", backend="torch", dtypes=("float32",), causal=True, mask=True, gqa=True)
def broken_causal_query_chunks(q, k, v, *, causal=False, mask=None, scale=None):  # type: ignore[no-untyped-def]
    tq, tk, d = q.shape[2], k.shape[2], q.shape[3]
    g = q.shape[1] // k.shape[1]
    if g > 1:
        k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    scale = 1.0 / float(d) ** 0.5 if scale is None else float(scale)
    full_mask = None if mask is None else mask.expand(*q.shape[:2], tq, tk)
    chunk = tq if tq <= WHOLE else CHUNK
    out = torch.empty_like(q)
    for start in range(0, tq, chunk):
        rows = slice(start, start + chunk)
        n = min(chunk, tq - start)
        allowed = torch.ones(n, tk, dtype=torch.bool).tril() if causal else None  # the bug: no diagonal=start
        if full_mask is not None:
            allowed = full_mask[:, :, rows] if allowed is None else allowed & full_mask[:, :, rows]
        out[:, :, rows] = _attend(q[:, :, rows], k, v, scale, allowed)
    return out
