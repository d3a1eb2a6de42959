"""BROKEN (softmax over the wrong axis): normalises over queries (dim -2) instead of keys."""
import sys
from pathlib import Path

import torch

from harness import register

sys.path.insert(0, str(Path(__file__).parent))
from _reference import masked_scores


@register("broken_softmax_axis", backend="torch", causal=True, mask=True)
def broken_softmax_axis(q, k, v, *, causal=False, mask=None, scale=None):
    s = masked_scores(q, k, causal=causal, mask=mask, scale=scale)
    return torch.softmax(s, -2).nan_to_num(0.0) @ v  # BUG: dim=-2
