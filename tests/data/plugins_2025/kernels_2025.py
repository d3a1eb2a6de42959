"""Plugins for the 2025 case space and re-entrant checkpointing, as bench loads them (a plugin file)."""

import torch
import torch.utils.checkpoint

from harness import register


@register("sinks_softcap_dv", backend="torch", causal=True, mask=True, gqa=True, grad=True, sinks=True, softcap=True,
          value_dim=True)
def sinks_softcap_dv(q, k, v, *, causal=False, mask=None, scale=None, sinks=None, softcap=None):
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    groups = q.shape[1] // k.shape[1]
    k, v = (x.repeat_interleave(groups, dim=1) for x in (k, v))
    scores = q @ k.transpose(-1, -2) * scale
    if softcap is not None:
        scores = softcap * torch.tanh(scores / softcap)
    tq, tk = scores.shape[-2:]
    allowed = torch.ones(tq, tk, dtype=torch.bool).tril() if causal else torch.ones(tq, tk, dtype=torch.bool)
    if mask is not None:
        allowed = allowed & mask
    scores = scores.masked_fill(~allowed, float("-inf"))
    column = sinks if sinks is not None else torch.full((q.shape[1],), float("-inf"), dtype=q.dtype)
    scores = torch.cat([scores, column.reshape(1, -1, 1, 1).expand(*scores.shape[:-1], 1)], dim=-1)
    some = torch.isfinite(scores).any(-1, keepdim=True)  # a row with no key and no sink: zeros, also in backward
    weights = torch.softmax(torch.where(some, scores, torch.zeros((), dtype=scores.dtype)), dim=-1)
    return (weights[..., :-1] * some) @ v


@register("reentrant_sdpa", backend="torch", causal=True, grad=True)
def reentrant_sdpa(q, k, v, *, causal=False, mask=None, scale=None):
    """SDPA under re-entrant checkpointing: right gradients, which torch.autograd.grad refuses to take."""
    def inner(q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
    return torch.utils.checkpoint.checkpoint(inner, q, k, v, use_reentrant=True)
