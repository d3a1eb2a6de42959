"""BROKEN (softmax over the wrong axis): normalises over queries (dim -2) instead of keys."""
import torch

from harness import register


@register("broken_softmax_axis", backend="torch", causal=True, mask=True)
def broken_softmax_axis(q, k, v, *, causal=False, mask=None, scale=None):
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    s = (q @ k.transpose(-1, -2)) * scale
    allowed = torch.ones(s.shape[-2:], dtype=torch.bool).tril() if causal else None
    if mask is not None:
        allowed = mask if allowed is None else allowed & mask
    if allowed is not None:
        s = s.masked_fill(~allowed, float("-inf"))
    return torch.softmax(s, -2).nan_to_num(0.0) @ v  # BUG: dim=-2
