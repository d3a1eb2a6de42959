"""BROKEN (GQA by bit shift): kv head = h >> log2(H/Hkv), right for ratios 2, 4, 8 and wrong for 3, 6, 7."""
import math

import torch

from harness import register


@register("broken_gqa_power_of_two", backend="torch", causal=True, gqa=True)
def broken_gqa_power_of_two(q, k, v, *, causal=False, mask=None, scale=None):
    shift = int(math.log2(q.shape[1] // k.shape[1]))  # BUG: assumes a power-of-two group size
    index = torch.arange(q.shape[1], device=q.device) >> shift
    index = index.clamp(max=k.shape[1] - 1)
    k, v = k[:, index], v[:, index]
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    s = (q @ k.transpose(-1, -2)) * scale
    if causal:
        s = s.masked_fill(~torch.ones(s.shape[-2:], dtype=torch.bool).tril(), float("-inf"))
    return torch.softmax(s, -1) @ v
