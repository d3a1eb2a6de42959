"""BROKEN (storage offset dropped): re-strides the inputs from the start of their storage, as raw-pointer code does."""
import sys
from pathlib import Path

import torch

from harness import register

sys.path.insert(0, str(Path(__file__).parent))
from _reference import attend


def _raw(x):
    return torch.as_strided(x, x.shape, x.stride(), 0)  # BUG: storage_offset forgotten


@register("broken_storage_offset", backend="torch", causal=True, mask=True, gqa=True)
def broken_storage_offset(q, k, v, *, causal=False, mask=None, scale=None):
    return attend(_raw(q), _raw(k), _raw(v), causal=causal, mask=mask, scale=scale)
