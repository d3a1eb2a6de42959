"""Broken: rows with no allowed key keep whatever a previous call of the same shape left there.

The kernel accumulates into a workspace it keeps per shape (to save an allocation per call) and
clears a row only when it writes that row, which it does only for rows with at least one allowed key.
A new workspace starts at zero, so the first call of a shape is right, and so is every later call
whose empty rows were empty before too. A row that had keys in an earlier call and has none now
returns the earlier call's answer instead of zeros.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from harness import register

sys.path.insert(0, str(Path(__file__).parent))
from _core import causal_and_mask, repeat_kv

_WORKSPACES: dict[tuple, torch.Tensor] = {}


@register("broken_stale_rows_workspace", backend="torch", dtypes=("float32",), causal=True, mask=True, gqa=True)
def broken_stale_rows_workspace(q, k, v, *, causal=False, mask=None, scale=None):  # type: ignore[no-untyped-def]
    batch, heads, tq, d = q.shape
    tk = k.shape[2]
    k, v = repeat_kv(q, k, v)
    scale = 1.0 / float(d) ** 0.5 if scale is None else float(scale)
    s = (q @ k.transpose(-1, -2)) * scale
    allowed = causal_and_mask(tq, tk, causal, mask)
    if allowed is None:
        return torch.softmax(s, -1) @ v
    allowed = allowed.expand(batch, heads, tq, tk)
    live = allowed.any(-1)
    p = torch.softmax(s.masked_fill(~allowed, float("-inf")), -1)
    key = (tuple(q.shape), q.dtype)
    work = _WORKSPACES.setdefault(key, torch.zeros(q.shape, dtype=q.dtype))
    work[live] = (p @ v)[live]  # the bug: rows with no key are neither written nor cleared
    return work.clone()
