"""BROKEN (all zeros): returns zeros; on small-valued inputs an absolute tolerance alone would pass it."""
import torch

from harness import register


@register("broken_zeros", backend="torch")
def broken_zeros(q, k, v, *, causal=False, mask=None, scale=None):
    return torch.zeros_like(q)  # BUG: no attention at all
