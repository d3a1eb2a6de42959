"""BROKEN (causal alignment): bottom-right causal (query i sees keys j <= i + Tk - Tq), the contract is top-left."""
import sys
from pathlib import Path

import torch

from harness import register

sys.path.insert(0, str(Path(__file__).parent))
from _reference import attend


@register("broken_causal_bottom_right", backend="torch", causal=True, mask=True, gqa=True)
def broken_causal_bottom_right(q, k, v, *, causal=False, mask=None, scale=None):
    tq, tk = q.shape[-2], k.shape[-2]
    allowed = torch.ones(tq, tk, dtype=torch.bool).tril(diagonal=tk - tq) if causal else None  # BUG: offset
    if mask is not None:
        allowed = mask if allowed is None else allowed & mask
    return attend(q, k, v, mask=allowed, scale=scale)
