"""BROKEN (causal off by one): query i also sees key i + 1."""
import torch

from harness import register


@register("broken_causal_off_by_one", backend="torch", causal=True)
def broken_causal_off_by_one(q, k, v, *, causal=False, mask=None, scale=None):
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    s = (q @ k.transpose(-1, -2)) * scale
    if causal:
        s = s.masked_fill(~torch.ones(s.shape[-2:], dtype=torch.bool).tril(1), float("-inf"))  # BUG: tril(1)
    return torch.softmax(s, -1) @ v
