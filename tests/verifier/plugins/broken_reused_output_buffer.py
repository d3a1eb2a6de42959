"""BROKEN (results stay valid): hands back one internal output buffer per shape, overwritten by the next call.
Every single call is right; a caller that keeps an earlier result (a previous layer's, a previous step's)
finds it replaced by the latest one."""
import sys
from pathlib import Path

import torch

from harness import register

sys.path.insert(0, str(Path(__file__).parent))
from _reference import attend

_BUFFERS: dict = {}


@register("broken_reused_output_buffer", backend="torch", causal=True, mask=True, gqa=True)
def broken_reused_output_buffer(q, k, v, *, causal=False, mask=None, scale=None):
    out = attend(q, k, v, causal=causal, mask=mask, scale=scale)
    buffer = _BUFFERS.setdefault((tuple(out.shape), out.dtype), torch.empty_like(out))
    return buffer.copy_(out)  # BUG: the same memory every call
