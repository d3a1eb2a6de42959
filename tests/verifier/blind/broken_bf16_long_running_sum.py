"""Broken: in bfloat16, past 2,048 keys, the online softmax keeps its running sum and output
accumulator in bfloat16.

Short rows take one fused pass accumulated in float32 and are right, as is every float32 call. The
long-context path streams 16-key blocks and adds each block's partial sums into bfloat16
accumulators: 8 bits of mantissa, and every addition rounds, so the error grows with the number
of blocks (at 4,096 keys, 256 roundings of the running sum).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from harness import register

sys.path.insert(0, str(Path(__file__).parent))
from _core import causal_and_mask

FUSED = 2048
BLOCK = 16


def _allowed(tq: int, tk: int, causal: bool, mask):  # type: ignore[no-untyped-def]
    allowed = causal_and_mask(tq, tk, causal, mask)
    return allowed


@register("broken_bf16_long_running_sum", backend="torch", dtypes=("float32", "bfloat16"), causal=True, mask=True)
def broken_bf16_long_running_sum(q, k, v, *, causal=False, mask=None, scale=None):  # type: ignore[no-untyped-def]
    tq, tk, d = q.shape[2], k.shape[2], q.shape[3]
    scale = 1.0 / float(d) ** 0.5 if scale is None else float(scale)
    allowed = _allowed(tq, tk, causal, mask)
    if q.dtype != torch.bfloat16 or tk <= FUSED:
        s = (q.float() @ k.float().transpose(-1, -2)) * scale
        if allowed is None:
            return (torch.softmax(s, -1) @ v.float()).to(q.dtype)
        p = torch.softmax(s.masked_fill(~allowed, float("-inf")), -1)
        return (torch.where(allowed.any(-1, keepdim=True), p, torch.zeros(())) @ v.float()).to(q.dtype)
    if allowed is None:
        allowed = torch.ones(tq, tk, dtype=torch.bool)
    allowed = allowed.expand(*q.shape[:2], tq, tk)
    acc_type = torch.bfloat16  # the bug: should be float32
    top = torch.full((*q.shape[:3], 1), float("-inf"))
    total = torch.zeros(*q.shape[:3], 1, dtype=acc_type)
    acc = torch.zeros(*q.shape[:3], d, dtype=acc_type)
    for start in range(0, tk, BLOCK):
        keys = slice(start, start + BLOCK)
        s = ((q.float() @ k[:, :, keys].float().transpose(-1, -2)) * scale).masked_fill(~allowed[..., keys], float("-inf"))
        new_top = torch.maximum(top, s.amax(-1, keepdim=True))
        safe = torch.where(torch.isfinite(new_top), new_top, torch.zeros_like(new_top))
        p = torch.exp(s - safe)
        rescale = torch.exp(torch.where(torch.isfinite(top), top, safe) - safe)
        total = (total.float() * rescale + p.sum(-1, keepdim=True)).to(acc_type)
        acc = (acc.float() * rescale + p @ v[:, :, keys].float()).to(acc_type)
        top = new_top
    total32 = total.float()
    return (acc.float() / torch.where(total32 > 0, total32, torch.ones_like(total32))).to(q.dtype)
