"""Broken: above 64 (batch, head) work items, the items are handed out in chunks of 48 and the
chunk count is rounded down.

Kernels switch strategy on the number of independent work items (FlashAttention's split heuristic,
a thread pool's static schedule). Up to 64 items this kernel runs them all at once and is right; past
64 it runs ``n // 48`` chunks of 48, so when 48 does not divide B x H the last items are never
computed and their outputs stay zero (B2 x H40 = 80 items: heads 16..39 of the second element).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from harness import register

sys.path.insert(0, str(Path(__file__).parent))
from _core import attend, repeat_kv

ALL_AT_ONCE = 64
CHUNK = 48


@register("broken_work_items_tail", backend="torch", dtypes=("float32",), causal=True, mask=True, gqa=True)
def broken_work_items_tail(q, k, v, *, causal=False, mask=None, scale=None):  # type: ignore[no-untyped-def]
    batch, heads, tq, d = q.shape
    tk = k.shape[2]
    k, v = repeat_kv(q, k, v)
    scale = 1.0 / float(d) ** 0.5 if scale is None else float(scale)
    allowed = torch.ones(tq, tk, dtype=torch.bool, device=q.device).tril() if causal else None
    if mask is not None:
        allowed = (mask if allowed is None else allowed & mask).expand(batch, heads, tq, tk)
    elif allowed is not None:
        allowed = allowed.expand(batch, heads, tq, tk)
    n = batch * heads
    if n <= ALL_AT_ONCE:
        return attend(q, k, v, scale, allowed)
    qf, kf, vf = (x.reshape(n, x.shape[2], d) for x in (q, k, v))
    af = None if allowed is None else allowed.reshape(n, tq, tk)
    out = torch.zeros(n, tq, d, dtype=q.dtype, device=q.device)
    for c in range(n // CHUNK):  # the bug: a partial last chunk is never scheduled
        items = slice(c * CHUNK, (c + 1) * CHUNK)
        out[items] = attend(qf[items], kf[items], vf[items], scale, None if af is None else af[items])
    return out.reshape(batch, heads, tq, d)
