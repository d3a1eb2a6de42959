"""BROKEN (layout of cache lengths): reads ``cache_seqlens`` from the start of its buffer, one int32 after
another (``data_ptr`` of the storage, not of the view). Right for a contiguous lengths tensor; wrong when it
is a view into a larger buffer (offset) or strided."""
import sys
from pathlib import Path

import torch

from harness import register

sys.path.insert(0, str(Path(__file__).parent))
from _reference import attend, cache_allowed


@register("broken_cache_lengths_ignore_offset", backend="torch", causal=True, gqa=True,
          structures=("bottom_right", "cache_seqlens"))
def broken_cache_lengths_ignore_offset(q, k, v, *, causal=False, mask=None, scale=None, causal_align="top_left",
                                       cache_seqlens=None):
    tq, tk = q.shape[-2], k.shape[-2]
    lengths = None
    if cache_seqlens is not None:  # BUG: read from the storage's start, offset and strides ignored
        lengths = torch.empty(0, dtype=cache_seqlens.dtype).set_(cache_seqlens.untyped_storage(), 0,
                                                                 cache_seqlens.shape).tolist()
    allowed = cache_allowed(tq, tk, lengths, causal=causal, causal_align=causal_align)
    return attend(q, k, v, mask=allowed, scale=scale)
