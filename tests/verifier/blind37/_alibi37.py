"""Multi-head attention that computes its own ALiBi from the head count, the slope rule a knob (the leading
underscore keeps this file out of the set). The bias is -slope_h * |i - j|; causal rows see only j <= i."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def mpt_slopes(heads):
    """MPT's gen_slopes: the slopes of the next power of two, odd positions first, then even, cut to ``heads``."""
    padded = 1 << math.ceil(math.log2(heads))
    slopes = 1.0 / 2.0 ** (torch.arange(1, padded + 1, dtype=torch.float64) * (8.0 / padded))
    if padded != heads:
        slopes = torch.cat([slopes[1::2], slopes[::2]])[:heads]
    return slopes


def geometric_slopes(heads):
    """2^(-8 i / H) for every H: right only when H is a power of two."""
    return torch.tensor([2.0 ** (-8.0 * i / heads) for i in range(1, heads + 1)], dtype=torch.float64)


def contiguous_extra_slopes(heads):
    """The closest power of two's slopes, then the FIRST heads - H' slopes of 2 H' (not every other one)."""
    closest = 2 ** int(math.floor(math.log2(heads)))
    extra = geometric_slopes(2 * closest)[: heads - closest]
    return torch.cat([geometric_slopes(closest), extra])


def mha(x, heads, weights, mask, causal, slopes):
    b, t, d_model = x.shape
    q, k, v = F.linear(x, weights.in_proj_weight, weights.in_proj_bias).chunk(3, dim=-1)
    q, k, v = (y.reshape(b, t, heads, -1).transpose(1, 2) for y in (q, k, v))
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32
    scores = (q.to(acc) @ k.to(acc).transpose(-1, -2)) * q.shape[-1] ** -0.5
    positions = torch.arange(t, dtype=acc)
    distance = (positions[:, None] - positions[None, :]).abs()
    scores = scores - slopes.to(acc)[:, None, None] * distance
    allowed = torch.ones(t, t, dtype=torch.bool).tril() if causal else None
    if mask is not None:
        padding = mask.to(torch.bool)[:, None, None, :]
        allowed = padding if allowed is None else allowed & padding
    if allowed is not None:
        scores = scores.masked_fill(~allowed, float("-inf"))
    out = (torch.softmax(scores, -1) @ v.to(acc)).to(x.dtype)
    return F.linear(out.transpose(1, 2).reshape(b, t, d_model), weights.out_proj_weight, weights.out_proj_bias)
