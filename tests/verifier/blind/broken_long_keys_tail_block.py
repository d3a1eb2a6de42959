"""Broken: past 4,096 keys the kernel streams keys in blocks of 512 and counts the blocks by floor
division, so a partial last block is never visited.

Up to 4,096 keys it attends the whole row at once and is right; long contexts take the streaming
path (online softmax over key blocks). Tk = 8,192 is a multiple of 512 and is right too; Tk = 5,000
drops keys 4,608..4,999 from every row.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from harness import register

sys.path.insert(0, str(Path(__file__).parent))
from _core import causal_and_mask, repeat_kv

WHOLE_ROW = 4096
BLOCK = 512


@register("broken_long_keys_tail_block", backend="torch", dtypes=("float32",), causal=True, mask=True, gqa=True)
def broken_long_keys_tail_block(q, k, v, *, causal=False, mask=None, scale=None):  # type: ignore[no-untyped-def]
    tq, tk, d = q.shape[2], k.shape[2], q.shape[3]
    k, v = repeat_kv(q, k, v)
    scale = 1.0 / float(d) ** 0.5 if scale is None else float(scale)
    allowed = causal_and_mask(tq, tk, causal, mask, q.device)
    if allowed is None:
        allowed = torch.ones(tq, tk, dtype=torch.bool, device=q.device)
    allowed = allowed.expand(*q.shape[:2], tq, tk)
    blocks = 1 if tk <= WHOLE_ROW else tk // BLOCK  # the bug: floor
    size = tk if tk <= WHOLE_ROW else BLOCK
    top = torch.full((*q.shape[:3], 1), float("-inf"), dtype=torch.float32)
    total = torch.zeros_like(top)
    acc = torch.zeros(*q.shape[:3], d, dtype=torch.float32)
    for b in range(blocks):
        keys = slice(b * size, (b + 1) * size)
        s = ((q @ k[:, :, keys].transpose(-1, -2)) * scale).float().masked_fill(~allowed[..., keys], float("-inf"))
        new_top = torch.maximum(top, s.amax(-1, keepdim=True))
        safe = torch.where(torch.isfinite(new_top), new_top, torch.zeros_like(new_top))
        p = torch.exp(s - safe)
        rescale = torch.exp(torch.where(torch.isfinite(top), top, safe) - safe)
        total = total * rescale + p.sum(-1, keepdim=True)
        acc = acc * rescale + p @ v[:, :, keys].float()
        top = new_top
    return (acc / torch.where(total > 0, total, torch.ones_like(total))).to(q.dtype)
