"""BROKEN (writes what it did not allocate): given a strided q (every other element of a wider buffer),
uses the gaps of that buffer as scratch for the scaled queries, as if unused memory were free. The output
is right and q's own elements are untouched; the caller's buffer around them is not."""
import sys
from pathlib import Path

import torch

from harness import register

sys.path.insert(0, str(Path(__file__).parent))
from _reference import attend


@register("broken_scratch_in_input_gaps", backend="torch", causal=True, mask=True, gqa=True)
def broken_scratch_in_input_gaps(q, k, v, *, causal=False, mask=None, scale=None):
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    if q.dim() == 4 and q.stride(-1) == 2:
        gaps = torch.empty(0, dtype=q.dtype).set_(q.untyped_storage(), q.storage_offset() + 1, q.shape, q.stride())
        gaps.copy_(q * scale)  # BUG: the caller's memory between q's elements
        return attend(gaps, k, v, causal=causal, mask=mask, scale=1.0)
    return attend(q, k, v, causal=causal, mask=mask, scale=scale)
