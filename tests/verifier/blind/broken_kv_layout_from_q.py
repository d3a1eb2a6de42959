"""Broken: the kernel decides the memory layout of all three inputs from q alone.

A C++ launcher checks ``q.is_contiguous()`` and, if so, takes the dense fast path for q, k and v,
indexing k's and v's storage with contiguous strides. Right whenever the three share a layout (all
contiguous, all transposed views of one packed QKV). Wrong for the common decode and cross-attention
call: a freshly computed contiguous q with k and v that are slices of a preallocated cache or
transposed views.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from harness import register

sys.path.insert(0, str(Path(__file__).parent))
from _core import attend, causal_and_mask, repeat_kv


def _dense_view(x: torch.Tensor) -> torch.Tensor:
    strides, step = [], 1
    for size in reversed(x.shape):
        strides.append(step)
        step *= size
    return torch.as_strided(x, x.shape, tuple(reversed(strides)), x.storage_offset())


@register("broken_kv_layout_from_q", backend="torch", dtypes=("float32",), causal=True, mask=True, gqa=True)
def broken_kv_layout_from_q(q, k, v, *, causal=False, mask=None, scale=None):  # type: ignore[no-untyped-def]
    if q.is_contiguous():  # the bug: k and v are assumed to be laid out as q is
        k, v = _dense_view(k), _dense_view(v)
    else:
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    tq, tk, d = q.shape[2], k.shape[2], q.shape[3]
    k, v = repeat_kv(q, k, v)
    scale = 1.0 / float(d) ** 0.5 if scale is None else float(scale)
    allowed = causal_and_mask(tq, tk, causal, mask)
    return attend(q, k, v, scale, allowed)
