"""Broken: a bias with a batch dimension is read from its first element for every element.

Broadcast bookkeeping in the kernel's bias loader: it supports (H, Tq, Tk), (1, H, Tq, Tk) and
(B, H, Tq, Tk) biases, but its batch stride is set to 0 in all three cases. Right for every bias
that is the same across the batch (ALiBi, relative-position tables); wrong for a per-element bias
(a document-dependent bias, T5 biases with padding folded in, a learned per-sample prior).
"""

from __future__ import annotations

import sys
from pathlib import Path

from harness import register

sys.path.insert(0, str(Path(__file__).parent))
from _core import causal_and_mask, repeat_kv, weigh


@register("broken_bias_first_batch", backend="torch", dtypes=("float32",), causal=True, mask=True, gqa=True, bias=True)
def broken_bias_first_batch(q, k, v, *, causal=False, mask=None, scale=None, bias=None):  # type: ignore[no-untyped-def]
    tq, tk, d = q.shape[2], k.shape[2], q.shape[3]
    k, v = repeat_kv(q, k, v)
    scale = 1.0 / float(d) ** 0.5 if scale is None else float(scale)
    s = (q @ k.transpose(-1, -2)) * scale
    if bias is not None:
        if bias.dim() == 4:
            bias = bias[:1]  # the bug: batch stride 0
        s = s + bias.to(s.dtype)
    allowed = causal_and_mask(tq, tk, causal, mask)
    return weigh(s, allowed) @ v
