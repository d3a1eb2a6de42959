"""BROKEN (causal flipped): query i sees keys j >= i (upper triangle) instead of j <= i."""
import torch

from harness import register


@register("broken_causal_flipped", backend="torch", causal=True)
def broken_causal_flipped(q, k, v, *, causal=False, mask=None, scale=None):
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    s = (q @ k.transpose(-1, -2)) * scale
    if causal:
        s = s.masked_fill(~torch.ones(s.shape[-2:], dtype=torch.bool).triu(), float("-inf"))  # BUG: triu
    return torch.softmax(s, -1) @ v
