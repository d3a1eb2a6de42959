"""Broken: packed sequences longer than 256 keys are attended in key blocks whose causal test
forgets the block's offset.

Unpacked batches take the dense kernel and are right. The varlen kernel attends each packed sequence
on its own (the block-diagonal part is right): a sequence of up to 256 keys is one block and is right;
a longer one is streamed in 256-key blocks, and under causality each block compares query i with the
key's index *inside the block*, so later blocks let early queries see future keys. Non-causal packed
batches and short sequences are right.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from harness import register

sys.path.insert(0, str(Path(__file__).parent))
from _core import repeat_kv

BLOCK = 256


def _sequence(q, k, v, scale, causal, align, window, packed):  # type: ignore[no-untyped-def]
    tq, tk = q.shape[1], k.shape[1]
    shift = tk - tq if align == "bottom_right" else 0
    i = torch.arange(tq)[:, None] + shift
    parts = []
    for start in range(0, max(tk, 1), BLOCK):
        stop = min(start + BLOCK, tk)
        j = torch.arange(start, stop)[None, :]
        local = j - start if packed and tk > BLOCK else j  # the bug: the varlen kernel drops the block offset
        ok = torch.ones(tq, stop - start, dtype=torch.bool)
        if causal:
            ok &= local <= i
        if window is not None:
            ok &= (j >= i - window[0]) & (j <= i + window[1])
        parts.append(ok)
    ok = torch.cat(parts, 1)[:, :tk]
    s = ((q @ k.transpose(-1, -2)) * scale).masked_fill(~ok, float("-inf"))
    p = torch.softmax(s, -1)
    return torch.where(ok.any(-1, keepdim=True), p, torch.zeros((), dtype=p.dtype)) @ v


@register("broken_varlen_long_sequence_blocks", backend="torch", dtypes=("float32",), causal=True, gqa=True,
          structures=("window", "bottom_right", "varlen"))
def broken_varlen_long_sequence_blocks(q, k, v, *, causal=False, mask=None, scale=None, window=None,  # type: ignore[no-untyped-def]
                                       causal_align="top_left", cu_seqlens_q=None, cu_seqlens_k=None):
    d = q.shape[3]
    k, v = repeat_kv(q, k, v)
    scale = 1.0 / float(d) ** 0.5 if scale is None else float(scale)
    if cu_seqlens_q is None:
        return torch.stack([_sequence(q[b], k[b], v[b], scale, causal, causal_align, window, False) for b in range(q.shape[0])])
    out = torch.zeros_like(q)
    for s in range(len(cu_seqlens_q) - 1):
        qs = slice(int(cu_seqlens_q[s]), int(cu_seqlens_q[s + 1]))
        ks = slice(int(cu_seqlens_k[s]), int(cu_seqlens_k[s + 1]))
        if qs.stop > qs.start and ks.stop > ks.start:
            out[0, :, qs] = _sequence(q[0, :, qs], k[0, :, ks], v[0, :, ks], scale, causal, causal_align, window, True)
    return out
