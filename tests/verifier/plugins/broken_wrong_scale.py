"""BROKEN (wrong scale): divides the scores by d instead of sqrt(d). Self-contained (no _reference import): the
cluster tests ship this one file to Ray nodes, where no sibling module travels with it."""
import torch

from harness import register


@register("broken_wrong_scale", backend="torch", causal=True, mask=True, gqa=True)
def broken_wrong_scale(q, k, v, *, causal=False, mask=None, scale=None):
    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    scale = 1.0 / q.shape[-1] if scale is None else scale  # BUG: 1/d, not 1/sqrt(d)
    s = (q @ k.transpose(-1, -2)) * scale
    allowed = torch.ones(s.shape[-2:], dtype=torch.bool).tril() if causal else None
    if mask is not None:
        allowed = mask if allowed is None else allowed & mask
    if allowed is not None:
        s = s.masked_fill(~allowed, float("-inf"))
    return torch.softmax(s, -1).nan_to_num(0.0) @ v
