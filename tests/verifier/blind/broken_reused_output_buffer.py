"""Broken: the output is written into an internal buffer kept per shape and handed back itself.

Each answer is right when it is returned, so a check that looks at one call at a time passes. But
the next call of the same shape overwrites the buffer: a caller that keeps the first layer's
output (a residual, a list of per-layer activations) finds it replaced by the second's.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from harness import register

sys.path.insert(0, str(Path(__file__).parent))
from _core import causal_and_mask, repeat_kv, weigh

_BUFFERS: dict[tuple, torch.Tensor] = {}


@register("broken_reused_output_buffer", backend="torch", dtypes=("float32", "float64"), causal=True, mask=True,
          gqa=True)
def broken_reused_output_buffer(q, k, v, *, causal=False, mask=None, scale=None):  # type: ignore[no-untyped-def]
    tq, tk, d = q.shape[2], k.shape[2], q.shape[3]
    k, v = repeat_kv(q, k, v)
    scale = 1.0 / float(d) ** 0.5 if scale is None else float(scale)
    s = (q @ k.transpose(-1, -2)) * scale
    allowed = causal_and_mask(tq, tk, causal, mask, q.device)
    p = weigh(s, allowed)
    key = (tuple(q.shape), q.dtype, q.device)
    if key not in _BUFFERS:
        _BUFFERS[key] = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    out = _BUFFERS[key]  # the bug: the same storage every call
    torch.matmul(p, v, out=out)
    return out
