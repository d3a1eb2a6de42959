"""BROKEN (padding assumed on the right): a key-padding mask becomes per-row lengths, keys [0, length) kept."""
import sys
from pathlib import Path

import torch

from harness import register

sys.path.insert(0, str(Path(__file__).parent))
from _reference import attend


@register("broken_right_padding_only", backend="torch", causal=True, mask=True, gqa=True)
def broken_right_padding_only(q, k, v, *, causal=False, mask=None, scale=None):
    if mask is not None:
        lengths = mask.sum(-1, keepdim=True)  # BUG: right for right padding, wrong for left padding or holes
        mask = torch.arange(mask.shape[-1], device=mask.device) < lengths
    return attend(q, k, v, causal=causal, mask=mask, scale=scale)
