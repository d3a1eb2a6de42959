"""Broken: ``scale = scale or 1/sqrt(d)``: a scale of 0 is taken for "not given".

The Python idiom treats 0.0 like None. Every positive or negative scale is right, and so is the
default. ``scale=0`` (uniform attention: every allowed key weighs the same, the output is the mean
of the allowed V rows; used to ablate attention and in some linear-attention baselines) silently
becomes 1/sqrt(d).
"""

from __future__ import annotations

import torch

from harness import register


@register("broken_scale_zero_falsy", backend="torch", dtypes=("float32", "float64"), causal=True, mask=True, gqa=True)
def broken_scale_zero_falsy(q, k, v, *, causal=False, mask=None, scale=None):  # type: ignore[no-untyped-def]
    tq, tk, d = q.shape[2], k.shape[2], q.shape[3]
    g = q.shape[1] // k.shape[1]
    if g > 1:
        k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    scale = scale or 1.0 / float(d) ** 0.5  # the bug
    s = (q @ k.transpose(-1, -2)) * scale
    allowed = torch.ones(tq, tk, dtype=torch.bool).tril() if causal else None
    if mask is not None:
        allowed = mask if allowed is None else allowed & mask
    if allowed is None:
        return torch.softmax(s, -1) @ v
    p = torch.softmax(s.masked_fill(~allowed, float("-inf")), -1)
    return torch.where(allowed.any(-1, keepdim=True), p, torch.zeros((), dtype=p.dtype)) @ v
