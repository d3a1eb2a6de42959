"""BROKEN (layout of the mask): reads the mask's memory as if it were contiguous (as a kernel taking
``mask.data_ptr()`` with row-major strides does). Right for every q, k, v layout and a contiguous mask;
wrong when the mask arrives transposed or strided."""
import sys
from pathlib import Path

import torch

from harness import register

sys.path.insert(0, str(Path(__file__).parent))
from _reference import attend


@register("broken_mask_assumes_contiguous", backend="torch", causal=True, mask=True, gqa=True)
def broken_mask_assumes_contiguous(q, k, v, *, causal=False, mask=None, scale=None):
    if mask is not None and not mask.is_contiguous():
        raw = torch.empty(0, dtype=mask.dtype, device=mask.device)
        mask = raw.set_(mask.untyped_storage(), mask.storage_offset(), mask.shape)  # BUG: its strides ignored
    return attend(q, k, v, causal=causal, mask=mask, scale=scale)
