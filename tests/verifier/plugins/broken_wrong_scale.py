"""BROKEN (wrong scale): divides the scores by d instead of sqrt(d)."""
import sys
from pathlib import Path

import torch

from harness import register

sys.path.insert(0, str(Path(__file__).parent))
from _reference import masked_scores, repeat_kv


@register("broken_wrong_scale", backend="torch", causal=True, mask=True, gqa=True)
def broken_wrong_scale(q, k, v, *, causal=False, mask=None, scale=None):
    k, v = repeat_kv(q, k, v)
    scale = 1.0 / q.shape[-1] if scale is None else scale  # BUG: 1/d, not 1/sqrt(d)
    s = masked_scores(q, k, causal=causal, mask=mask, scale=scale)
    return torch.softmax(s, -1).nan_to_num(0.0) @ v
