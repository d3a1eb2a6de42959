"""Positional variants applied as case options: ALiBi biases (more to come: RoPE)."""

from __future__ import annotations

import torch


def alibi_slopes(heads: int) -> torch.Tensor:
    """Per-head slopes 2^(-8 i / H), i = 1..H (Press et al.), float64."""
    return torch.tensor([2.0 ** (-8.0 * i / heads) for i in range(1, heads + 1)], dtype=torch.float64)


def alibi_bias(heads: int, tq: int, tk: int) -> torch.Tensor:
    """Additive bias (1, H, Tq, Tk): -slope_h * |i - j|, float64 (queries and keys aligned at 0)."""
    distance = (torch.arange(tq, dtype=torch.float64)[:, None] - torch.arange(tk, dtype=torch.float64)[None, :]).abs()
    return -alibi_slopes(heads)[None, :, None, None] * distance
