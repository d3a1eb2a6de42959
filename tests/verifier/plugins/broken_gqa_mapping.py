"""BROKEN (wrong GQA head mapping): query head h reads kv head h % Hkv (repeat) instead of h // (H/Hkv)."""
import torch

from harness import register


@register("broken_gqa_mapping", backend="torch", gqa=True)
def broken_gqa_mapping(q, k, v, *, causal=False, mask=None, scale=None):
    g = q.shape[1] // k.shape[1]
    k, v = k.repeat(1, g, 1, 1), v.repeat(1, g, 1, 1)  # BUG: tiles heads; should be repeat_interleave
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    return torch.softmax((q @ k.transpose(-1, -2)) * scale, -1) @ v
