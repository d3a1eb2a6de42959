"""BROKEN (NaN on rows with no allowed key): a plain softmax over a row of -inf gives NaN, not zeros."""
import sys
from pathlib import Path

import torch

from harness import register

sys.path.insert(0, str(Path(__file__).parent))
from _reference import masked_scores


@register("broken_nan_empty_rows", backend="torch", causal=True, mask=True)
def broken_nan_empty_rows(q, k, v, *, causal=False, mask=None, scale=None):
    s = masked_scores(q, k, causal=causal, mask=mask, scale=scale)
    return torch.softmax(s, -1) @ v  # BUG: no zeroing of empty rows
