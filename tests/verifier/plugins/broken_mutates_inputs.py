"""BROKEN (inputs mutated): scales q in place to save a temporary; the result is right, the caller's q is not."""
import torch

from harness import register


@register("broken_mutates_inputs", backend="torch")
def broken_mutates_inputs(q, k, v, *, causal=False, mask=None, scale=None):
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    q.mul_(scale)  # BUG: modifies the caller's tensor
    return torch.softmax(q @ k.transpose(-1, -2), -1) @ v
