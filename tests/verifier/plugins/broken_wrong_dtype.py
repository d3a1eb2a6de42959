"""BROKEN (wrong dtype): always returns float32, whatever q's dtype (a stray .float())."""
import torch

from harness import register


@register("broken_wrong_dtype", backend="torch", dtypes=("float32", "float64"))
def broken_wrong_dtype(q, k, v, *, causal=False, mask=None, scale=None):
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    return (torch.softmax((q @ k.transpose(-1, -2)) * scale, -1) @ v).float()  # BUG: .float()
