"""BROKEN (a GQA group past 8): query head h reads kv head h // 8 whatever the group, as a kernel
specialised for groups up to 8 (a fixed-size register tile) does. Right for groups 1..8, wrong for
16 (Llama-3 405B's 128/8) and beyond."""
import sys
from pathlib import Path

import torch

from harness import register

sys.path.insert(0, str(Path(__file__).parent))
from _reference import attend


@register("broken_gqa_group_over_8", backend="torch", gqa=True, causal=True, mask=True)
def broken_gqa_group_over_8(q, k, v, *, causal=False, mask=None, scale=None):
    heads, kv_heads = q.shape[1], k.shape[1]
    g = heads // kv_heads
    index = torch.arange(heads) // (g if g <= 8 else 8)  # BUG: capped at 8
    index = index.clamp(max=kv_heads - 1)
    return attend(q, k[:, index], v[:, index], causal=causal, mask=mask, scale=scale)
