"""BROKEN (a GQA group past 8): query head h reads kv head h // 8 whatever the group, as a kernel
specialised for groups up to 8 (a fixed-size register tile) does. Right for groups 1..8, wrong for
16 (Llama-3 405B's 128/8) and beyond."""
import torch

from harness import register


@register("broken_gqa_group_over_8", backend="torch", gqa=True, causal=True, mask=True)
def broken_gqa_group_over_8(q, k, v, *, causal=False, mask=None, scale=None):
    heads, kv_heads = q.shape[1], k.shape[1]
    g = heads // kv_heads
    index = torch.arange(heads) // (g if g <= 8 else 8)  # BUG: capped at 8
    index = index.clamp(max=kv_heads - 1)
    k, v = k[:, index], v[:, index]
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    s = q @ k.transpose(-1, -2) * scale
    allowed = torch.ones(s.shape[-2:], dtype=torch.bool).tril() if causal else None
    if mask is not None:
        allowed = mask if allowed is None else allowed & mask
    if allowed is None:
        return torch.softmax(s, -1) @ v
    allowed = allowed.expand(s.shape)
    p = torch.softmax(s.masked_fill(~allowed, float("-inf")), -1)
    return (p @ v).masked_fill(~allowed.any(-1, keepdim=True), 0.0)
