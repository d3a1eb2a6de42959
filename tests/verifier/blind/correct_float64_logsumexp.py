"""Correct, unusual: weights as ``exp(s - logsumexp(s))`` with the log-sum-exp in float64, any input dtype.

No max-subtraction step and no division: the normaliser is one float64 log-sum-exp per row, and
each weight is a single exponential of a difference. Differentiable by autograd (the float64
graph), so it declares gradients; rows with no allowed key give zeros, with zero gradients.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from harness import register

sys.path.insert(0, str(Path(__file__).parent))
from _core import causal_and_mask


@register("correct_float64_logsumexp", backend="torch", dtypes=("float32", "float64", "bfloat16", "float16"),
          causal=True, mask=True, gqa=True, bias=True, grad=True)
def correct_float64_logsumexp(q, k, v, *, causal=False, mask=None, scale=None, bias=None):  # type: ignore[no-untyped-def]
    tq, tk, d = q.shape[2], k.shape[2], q.shape[3]
    g = q.shape[1] // k.shape[1]
    q64, k64, v64 = q.double(), k.double(), v.double()
    if g > 1:
        k64, v64 = k64.repeat_interleave(g, 1), v64.repeat_interleave(g, 1)
    scale = 1.0 / float(d) ** 0.5 if scale is None else float(scale)
    s = (q64 @ k64.transpose(-1, -2)) * scale
    if bias is not None:
        s = s + bias.double()
    allowed = causal_and_mask(tq, tk, causal, mask)
    if allowed is not None:
        live = allowed.any(-1, keepdim=True)
        s = s.masked_fill(~allowed, float("-inf")).masked_fill(~live, 0.0)  # an empty row: finite, zeroed below
    lse = torch.logsumexp(s, -1, keepdim=True)
    p = torch.exp(s - lse)
    if allowed is not None:
        p = p * live
    return (p @ v64).to(q.dtype)
