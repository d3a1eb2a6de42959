"""BROKEN (no max-subtraction): exp(scores) / sum overflows to inf/inf = NaN on large logits."""
import torch

from harness import register


@register("broken_no_max_subtraction", backend="torch", dtypes=("float32", "float16"))
def broken_no_max_subtraction(q, k, v, *, causal=False, mask=None, scale=None):
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    w = torch.exp((q @ k.transpose(-1, -2)) * scale)  # BUG: no row max subtracted
    return (w / w.sum(-1, keepdim=True)) @ v
