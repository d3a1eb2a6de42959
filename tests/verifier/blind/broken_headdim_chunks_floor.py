"""Broken: head dims above 128 are cut into 128-wide chunks, counted with floor division.

FlashAttention-style kernels keep one 128-column tile of Q and K in registers and loop over the
head dim in tiles beyond that. Here the tile count is ``d // 128``: right for d <= 128 (one tile,
the fast path) and for d = 256, but for d = 160, 192 or 200 the last partial tile of the
dot products is never added, so the scores miss the trailing columns.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from harness import register

sys.path.insert(0, str(Path(__file__).parent))
from _core import causal_and_mask, repeat_kv, weigh

TILE = 128


def _scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    d = q.shape[-1]
    if d <= TILE:
        return q @ k.transpose(-1, -2)
    s = torch.zeros(*q.shape[:-1], k.shape[-2], dtype=q.dtype, device=q.device)
    for t in range(d // TILE):  # the bug: floor, so a partial last tile is dropped
        cols = slice(t * TILE, (t + 1) * TILE)
        s += q[..., cols] @ k[..., cols].transpose(-1, -2)
    return s


@register("broken_headdim_chunks_floor", backend="torch", dtypes=("float32", "float64"), causal=True, mask=True,
          gqa=True)
def broken_headdim_chunks_floor(q, k, v, *, causal=False, mask=None, scale=None):  # type: ignore[no-untyped-def]
    tq, tk, d = q.shape[2], k.shape[2], q.shape[3]
    k, v = repeat_kv(q, k, v)
    scale = 1.0 / float(d) ** 0.5 if scale is None else float(scale)
    s = _scores(q, k) * scale
    allowed = causal_and_mask(tq, tk, causal, mask, q.device)
    return weigh(s, allowed) @ v
