"""The correct pieces every plugin of this set shares (the leading underscore keeps this file out of the set): an
FP8 cache read as the contract says, ``stored * scale``, and attention over it; each broken plugin replaces one
reading of the scales."""
from __future__ import annotations

import torch


def by_group(scale: torch.Tensor) -> torch.Tensor:
    """A scale shaped to multiply a cache (B, Hkv, T, d): (1,) and (Hkv,) by kv head, (B, Hkv, T) by row."""
    s = scale.to(torch.float32)
    return s.reshape(1, -1, 1, 1) if s.dim() == 1 else s[..., None]


def dequantized(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """An FP8 cache in float32: each stored value times its scale."""
    return x.to(torch.float32) * by_group(scale)


def grouped(k: torch.Tensor, heads: int) -> torch.Tensor:
    """K or V with each kv head repeated for its group of query heads."""
    g = heads // k.shape[1]
    return k.repeat_interleave(g, 1) if g > 1 else k


def allowed_keys(tq: int, tk: int, causal: bool, mask: torch.Tensor | None) -> torch.Tensor | None:
    """Top-left causal and the boolean mask (the harness folds cache lengths and bottom-right alignment into it)."""
    allowed = torch.ones(tq, tk, dtype=torch.bool).tril() if causal else None
    if mask is not None:
        allowed = mask if allowed is None else allowed & mask
    return allowed


def weights(logits: torch.Tensor, allowed: torch.Tensor | None) -> torch.Tensor:
    """Softmax over the allowed keys; a row with none weighs nothing."""
    if allowed is None:
        return torch.softmax(logits, -1)
    p = torch.softmax(logits.masked_fill(~allowed, float("-inf")), -1)
    return torch.where(allowed.any(-1, keepdim=True), p, torch.zeros((), dtype=p.dtype))


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool, mask: torch.Tensor | None,
           scale: float | None) -> torch.Tensor:
    """softmax(q k^T * scale, masked) v in float32 over K and V already in float32, output in q's dtype."""
    heads, tq, d = q.shape[1], q.shape[2], q.shape[3]
    sm = d ** -0.5 if scale is None else float(scale)
    k, v = grouped(k, heads), grouped(v, heads)
    logits = (q.to(torch.float32) @ k.transpose(-1, -2)) * sm
    return (weights(logits, allowed_keys(tq, k.shape[2], causal, mask)) @ v).to(q.dtype)
