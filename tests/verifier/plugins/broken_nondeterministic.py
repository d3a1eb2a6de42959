"""BROKEN (undeclared nondeterminism): sums in a random order each call; passes the rule, never the same bits."""
import torch

from harness import register


@register("broken_nondeterministic", backend="torch", causal=True, gqa=True)
def broken_nondeterministic(q, k, v, *, causal=False, mask=None, scale=None):
    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    s = (q @ k.transpose(-1, -2)) * scale
    if causal:
        s = s.masked_fill(~torch.ones(s.shape[-2:], dtype=torch.bool).tril(), float("-inf"))
    p = torch.softmax(s, -1)
    order = torch.randperm(k.shape[-2])  # BUG: a different summation order every call, not declared
    return p[..., order] @ v[..., order, :]
