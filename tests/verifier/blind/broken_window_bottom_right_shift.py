"""Broken: a sliding window aligned bottom-right measures its left edge from the wrong diagonal
when Tq != Tk.

The causal part is right in both alignments, and every window is right when Tq == Tk or aligned
top-left. With bottom-right alignment the kernel shifts key positions by ``Tk - Tq`` for causality
but its window test uses ``Tk - Tq - 1`` (a chunked-prefill kernel counting the current token as
already cached): each row's window reaches one key further into the past.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from harness import register

sys.path.insert(0, str(Path(__file__).parent))
from _core import repeat_kv


@register("broken_window_bottom_right_shift", backend="torch", dtypes=("float32",), causal=True, mask=True, gqa=True,
          structures=("window", "bottom_right"))
def broken_window_bottom_right_shift(q, k, v, *, causal=False, mask=None, scale=None, window=None,  # type: ignore[no-untyped-def]
                                     causal_align="top_left"):
    tq, tk, d = q.shape[2], k.shape[2], q.shape[3]
    k, v = repeat_kv(q, k, v)
    scale = 1.0 / float(d) ** 0.5 if scale is None else float(scale)
    i = torch.arange(tq)[:, None]
    j = torch.arange(tk)[None, :]
    shift = tk - tq if causal_align == "bottom_right" else 0
    allowed = torch.ones(tq, tk, dtype=torch.bool)
    if causal:
        allowed &= j - shift <= i
    if window is not None:
        wshift = shift - 1 if causal_align == "bottom_right" and tq != tk else shift  # the bug
        allowed &= (j - wshift >= i - window[0]) & (j - shift <= i + window[1])
    if mask is not None:
        allowed = allowed & mask
    s = ((q @ k.transpose(-1, -2)) * scale).masked_fill(~allowed, float("-inf"))
    p = torch.softmax(s, -1)
    return torch.where(allowed.any(-1, keepdim=True), p, torch.zeros((), dtype=p.dtype)) @ v
