"""Broken: past 2,048 queries, queries are processed in chunks of 1,024 and each chunk's causal
mask is built as if the chunk started at query 0.

Long prefills are split along the queries to bound the T x T scores. The first chunk is right; in
every later chunk query ``c * 1024 + i`` is allowed keys ``j <= i`` instead of ``j <= c * 1024 + i``,
so it loses most of its past. Up to 2,048 queries the whole matrix is formed at once and is right.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from harness import register

sys.path.insert(0, str(Path(__file__).parent))
from _core import attend, repeat_kv

WHOLE = 2048
CHUNK = 1024


@register("broken_causal_query_chunks", backend="torch", dtypes=("float32",), causal=True, mask=True, gqa=True)
def broken_causal_query_chunks(q, k, v, *, causal=False, mask=None, scale=None):  # type: ignore[no-untyped-def]
    tq, tk, d = q.shape[2], k.shape[2], q.shape[3]
    k, v = repeat_kv(q, k, v)
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
        out[:, :, rows] = attend(q[:, :, rows], k, v, scale, allowed)
    return out
