"""Correct, unusual: an online softmax that visits the keys from last to first, in blocks of 37.

Attention is a sum over keys; its order is free. Walking backwards (as a kernel that streams a KV
cache newest-first might) changes which key sets the running maximum first and so every rescale,
and a block size of 37 leaves a ragged block at the *start* of the row. Accumulates in float32
(float64 for float64 inputs), so it is as accurate as the forward formula.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from harness import register

sys.path.insert(0, str(Path(__file__).parent))
from _core import causal_and_mask, repeat_kv

BLOCK = 37


@register("correct_reverse_online_softmax", backend="torch", dtypes=("float32", "float64", "bfloat16"), causal=True,
          mask=True, gqa=True, bias=True)
def correct_reverse_online_softmax(q, k, v, *, causal=False, mask=None, scale=None, bias=None):  # type: ignore[no-untyped-def]
    tq, tk, d = q.shape[2], k.shape[2], q.shape[3]
    k, v = repeat_kv(q, k, v)
    acc_type = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = 1.0 / float(d) ** 0.5 if scale is None else float(scale)
    allowed = causal_and_mask(tq, tk, causal, mask)
    if allowed is None:
        allowed = torch.ones(tq, tk, dtype=torch.bool)
    allowed = allowed.expand(*q.shape[:2], tq, tk)
    qa = q.to(acc_type)
    top = torch.full((*q.shape[:3], 1), float("-inf"), dtype=acc_type)
    total = torch.zeros_like(top)
    acc = torch.zeros(*q.shape[:3], d, dtype=acc_type)
    for stop in range(tk, 0, -BLOCK):
        keys = slice(max(stop - BLOCK, 0), stop)
        s = (qa @ k[:, :, keys].to(acc_type).transpose(-1, -2)) * scale
        if bias is not None:
            s = s + bias.to(acc_type).expand(*q.shape[:2], tq, tk)[..., keys]
        s = s.masked_fill(~allowed[..., keys], float("-inf"))
        new_top = torch.maximum(top, s.amax(-1, keepdim=True))
        safe = torch.where(torch.isfinite(new_top), new_top, torch.zeros_like(new_top))
        p = torch.exp(s - safe)
        rescale = torch.exp(torch.where(torch.isfinite(top), top, safe) - safe)
        total = total * rescale + p.sum(-1, keepdim=True)
        acc = acc * rescale + p @ v[:, :, keys].to(acc_type)
        top = new_top
    return (acc / torch.where(total > 0, total, torch.ones_like(total))).to(q.dtype)
