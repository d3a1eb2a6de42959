"""BROKEN (wrong layout): returns (B, Tq, H, d), the layout of flash-attn's API, not (B, H, Tq, d)."""
import torch

from harness import register


@register("broken_wrong_layout", backend="torch")
def broken_wrong_layout(q, k, v, *, causal=False, mask=None, scale=None):
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    out = torch.softmax((q @ k.transpose(-1, -2)) * scale, -1) @ v
    return out.transpose(1, 2).contiguous()  # BUG: (B, Tq, H, d)
