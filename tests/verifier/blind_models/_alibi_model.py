"""Multi-head attention that computes its own ALiBi from the head count, the slope rule a knob (the leading
underscore keeps this file out of the set). The bias is -slope_h * |i - j|; causal rows see only j <= i."""
from __future__ import annotations

import math

import torch
from _module_model import mha as layer  # beside this file, on the path the plugins set


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
    """``_module_model``'s layer (no RoPE) with the ALiBi bias -slope_h * |i - j| built from ``slopes``."""
    t = x.shape[1]
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32
    positions = torch.arange(t, dtype=acc)
    distance = (positions[:, None] - positions[None, :]).abs()
    return layer(x, heads, weights, mask, causal, -(slopes.to(acc)[:, None, None] * distance), None, None)
