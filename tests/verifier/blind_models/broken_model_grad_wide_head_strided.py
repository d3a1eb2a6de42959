"""BROKEN: for head dims past 128 with a non-contiguous input, the backward takes the strided path, which writes
dV for the first 128 columns only (the second head-dim tile is never stored). Forward right everywhere; the
backward right for d <= 128 and for contiguous inputs."""
import sys
from pathlib import Path

import torch

from harness import register

sys.path.insert(0, str(Path(__file__).parent))
from _core_model import allowed_keys, plain


class _DropTail(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        grad = grad.clone()
        grad[..., 128:] = 0  # BUG
        return grad


@register("broken_model_grad_wide_head_strided", backend="torch", dtypes=("float32", "bfloat16", "float16"), causal=True,
          mask=True, gqa=True, grad=True)
def broken_model_grad_wide_head_strided(q, k, v, *, causal=False, mask=None, scale=None):
    if q.shape[-1] > 128 and not all(x.is_contiguous() for x in (q, k, v)):
        v = _DropTail.apply(v)
    allowed = allowed_keys(q.shape[2], k.shape[2], batch=q.shape[0], causal=causal, mask=mask)
    return plain(q, k, v, allowed, scale)
