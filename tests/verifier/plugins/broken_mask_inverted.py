"""BROKEN (inverted mask convention): treats True as "masked out" (the additive-mask habit)."""
import torch

from harness import register


@register("broken_mask_inverted", backend="torch", mask=True)
def broken_mask_inverted(q, k, v, *, causal=False, mask=None, scale=None):
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    s = (q @ k.transpose(-1, -2)) * scale
    if mask is not None:
        s = s.masked_fill(mask, float("-inf"))  # BUG: should be ~mask
    return torch.softmax(s, -1).nan_to_num(0.0) @ v
