"""BROKEN: the GQA backward takes dK and dV from the first query head of each group, times the group size, instead
of summing the group (a reduction kernel that assumes the heads of a group agree). Forward right; the backward
right without GQA."""
import sys
from pathlib import Path

import torch

from harness import register

sys.path.insert(0, str(Path(__file__).parent))
from _core_model import allowed_keys, plain


class _Expand(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, g):
        ctx.g = g
        return x.repeat_interleave(g, 1)

    @staticmethod
    def backward(ctx, grad):
        return grad[:, ::ctx.g] * ctx.g, None  # BUG: should be the sum over the group


@register("broken_model_gqa_grad_first_head", backend="torch", dtypes=("float32", "bfloat16", "float16"), causal=True,
          mask=True, gqa=True, grad=True)
def broken_model_gqa_grad_first_head(q, k, v, *, causal=False, mask=None, scale=None):
    g = q.shape[1] // k.shape[1]
    if g > 1:
        k, v = _Expand.apply(k, g), _Expand.apply(v, g)
    allowed = allowed_keys(q.shape[2], k.shape[2], batch=q.shape[0], causal=causal, mask=mask)
    return plain(q, k, v, allowed, scale)
