"""Broken: a hand-written backward that reads the upstream gradient as if it were contiguous.

The forward is right. The backward stands for a C++ kernel that takes ``grad_out.data_ptr()`` and
indexes it with contiguous strides: correct whenever autograd hands it a contiguous dO, wrong when
dO is a transposed or strided view (a caller that computes ``out.transpose(1, 2)`` before its loss,
as every model that merges heads does, sends exactly that).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from harness import register

sys.path.insert(0, str(Path(__file__).parent))
from _core import causal_and_mask


def _contiguous_strides(shape: torch.Size) -> tuple[int, ...]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= size
    return tuple(reversed(strides))


def _probs(q: torch.Tensor, k: torch.Tensor, scale: float, allowed: torch.Tensor | None) -> torch.Tensor:
    s = (q @ k.transpose(-1, -2)) * scale
    if allowed is not None:
        s = s.masked_fill(~allowed, float("-inf"))
    top = s.amax(-1, keepdim=True)
    top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
    p = torch.exp(s - top)
    total = p.sum(-1, keepdim=True)
    return p / torch.where(total > 0, total, torch.ones_like(total))


class _Attention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, scale, allowed):  # type: ignore[no-untyped-def]
        p = _probs(q, k, scale, allowed)
        ctx.save_for_backward(q, k, v, p)
        ctx.scale = scale
        return p @ v

    @staticmethod
    def backward(ctx, grad_out):  # type: ignore[no-untyped-def]
        q, k, v, p = ctx.saved_tensors
        # the bug: the kernel's pointer arithmetic assumes a dense (B, H, Tq, d) dO
        dout = torch.as_strided(grad_out, grad_out.shape, _contiguous_strides(grad_out.shape), grad_out.storage_offset())
        dv = p.transpose(-1, -2) @ dout
        dp = dout @ v.transpose(-1, -2)
        ds = p * (dp - (dp * p).sum(-1, keepdim=True))
        return ctx.scale * ds @ k, ctx.scale * ds.transpose(-1, -2) @ q, dv, None, None


@register("broken_grad_noncontiguous_upstream", backend="torch", dtypes=("float32",), causal=True, mask=True, grad=True)
def broken_grad_noncontiguous_upstream(q, k, v, *, causal=False, mask=None, scale=None):  # type: ignore[no-untyped-def]
    tq, tk, d = q.shape[2], k.shape[2], q.shape[3]
    scale = 1.0 / float(d) ** 0.5 if scale is None else float(scale)
    allowed = causal_and_mask(tq, tk, causal, mask, q.device)
    return _Attention.apply(q, k, v, scale, allowed)
