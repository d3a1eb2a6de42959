"""Broken: with a single key, the output is returned as a broadcast view of ``v``.

With one key and no mask every query's softmax weight is 1, so the output *is* V's row: a kernel
that skips the work returns ``v.expand(...)``. The values are exact; but the result shares storage
with an input (writing into the output writes into V; every query row is the same memory), and the
contract's output is a new array.
"""

from __future__ import annotations

import torch

from harness import register


@register("broken_returns_input_view", backend="torch", dtypes=("float32", "float64"), causal=True, mask=True)
def broken_returns_input_view(q, k, v, *, causal=False, mask=None, scale=None):  # type: ignore[no-untyped-def]
    batch, heads, tq, d = q.shape
    tk = k.shape[2]
    if tk == 1 and mask is None:  # the bug: a view of the input, not a result of its own
        return v.expand(batch, heads, tq, d)
    scale = 1.0 / float(d) ** 0.5 if scale is None else float(scale)
    s = (q @ k.transpose(-1, -2)) * scale
    allowed = torch.ones(tq, tk, dtype=torch.bool, device=q.device).tril() if causal else None
    if mask is not None:
        allowed = mask if allowed is None else allowed & mask
    if allowed is None:
        return torch.softmax(s, -1) @ v
    p = torch.softmax(s.masked_fill(~allowed, float("-inf")), -1)
    return torch.where(allowed.any(-1, keepdim=True), p, torch.zeros((), dtype=p.dtype)) @ v
