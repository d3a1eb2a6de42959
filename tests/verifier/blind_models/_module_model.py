"""Multi-head attention with its projections and RoPE, the RoPE table's dtype a knob (the leading underscore keeps
this file out of the set)."""
from __future__ import annotations

import torch
import torch.nn.functional as F


def rotate(x, convention, table_dtype, base=10000.0):
    """x (B, H, T, d) turned by position; positions, frequencies, angles, cos and sin computed in ``table_dtype``."""
    t, d = x.shape[-2], x.shape[-1]
    inv_freq = base ** (-torch.arange(0, d, 2, dtype=table_dtype) / d)
    angles = torch.arange(t, dtype=table_dtype)[:, None] * inv_freq
    if convention == "interleaved":
        angles = angles.repeat_interleave(2, dim=-1)
        swapped = torch.stack([-x[..., 1::2], x[..., 0::2]], dim=-1).flatten(-2)
    else:
        angles = torch.cat([angles, angles], dim=-1)
        swapped = torch.cat([-x[..., d // 2:], x[..., : d // 2]], dim=-1)
    return x * angles.cos().to(x.dtype) + swapped * angles.sin().to(x.dtype)


def mha(x, heads, weights, mask, causal, bias, rope, table_dtype):
    b, t, d_model = x.shape
    q, k, v = F.linear(x, weights.in_proj_weight, weights.in_proj_bias).chunk(3, dim=-1)
    q, k, v = (y.reshape(b, t, heads, -1).transpose(1, 2) for y in (q, k, v))
    if rope:
        q, k = rotate(q, rope, table_dtype), rotate(k, rope, table_dtype)
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32
    scores = (q.to(acc) @ k.to(acc).transpose(-1, -2)) * q.shape[-1] ** -0.5
    if bias is not None:
        scores = scores + bias.to(acc)
    allowed = torch.ones(t, t, dtype=torch.bool).tril() if causal else None
    if mask is not None:
        padding = mask.to(torch.bool)[:, None, None, :]
        allowed = padding if allowed is None else allowed & padding
    if allowed is not None:
        scores = scores.masked_fill(~allowed, float("-inf"))
    out = (torch.softmax(scores, -1) @ v.to(acc)).to(x.dtype)
    return F.linear(out.transpose(1, 2).reshape(b, t, d_model), weights.out_proj_weight, weights.out_proj_bias)
