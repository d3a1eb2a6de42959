"""Broken: when a boolean mask is given, the additive bias is dropped.

The wrapper feeds a fused kernel that takes one ``attn_mask`` (as SDPA does): a bias alone is passed
as that float mask, a boolean mask alone as itself, and when both come it passes the boolean mask
and forgets to add the bias into it. Right with a bias (ALiBi, causal or not) or a mask alone.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from harness import register

sys.path.insert(0, str(Path(__file__).parent))
from _core import repeat_kv


@register("broken_bias_dropped_with_mask", backend="torch", dtypes=("float32",), causal=True, mask=True, gqa=True,
          bias=True, grad=True)
def broken_bias_dropped_with_mask(q, k, v, *, causal=False, mask=None, scale=None, bias=None):  # type: ignore[no-untyped-def]
    tq, tk, d = q.shape[2], k.shape[2], q.shape[3]
    k, v = repeat_kv(q, k, v)
    scale = 1.0 / float(d) ** 0.5 if scale is None else float(scale)
    attn_mask = bias if mask is None else mask  # the bug: both given, only the mask survives
    s = (q @ k.transpose(-1, -2)) * scale
    allowed = torch.ones(tq, tk, dtype=torch.bool).tril() if causal else None
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        allowed = attn_mask if allowed is None else allowed & attn_mask
    elif attn_mask is not None:
        s = s + attn_mask.to(s.dtype)
    if allowed is None:
        return torch.softmax(s, -1) @ v
    s = s.masked_fill(~allowed, float("-inf"))
    top = s.amax(-1, keepdim=True).detach()
    p = torch.exp(s - torch.where(torch.isfinite(top), top, torch.zeros_like(top)))
    total = p.sum(-1, keepdim=True)
    return (p / torch.where(total > 0, total, torch.ones_like(total))) @ v
