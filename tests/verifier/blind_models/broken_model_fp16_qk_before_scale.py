"""BROKEN: half-precision Q K^T is formed in the input dtype before the softmax scale is applied (the scale is
folded in afterwards, in float32). A raw |q.k| past 65,504 is +-inf in float16 even when the scaled logit is
ordinary: the row becomes NaN. Right for float32/bfloat16 and for every float16 input of ordinary size."""
import sys
from pathlib import Path

import torch

from harness import register

sys.path.insert(0, str(Path(__file__).parent))
from _core_model import allowed_keys


@register("broken_model_fp16_qk_before_scale", backend="torch", dtypes=("float32", "float16", "bfloat16"), causal=True,
          mask=True, gqa=True)
def broken_model_fp16_qk_before_scale(q, k, v, *, causal=False, mask=None, scale=None):
    g = q.shape[1] // k.shape[1]
    ke, ve = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    scale = q.shape[-1] ** -0.5 if scale is None else float(scale)
    s = (q @ ke.transpose(-1, -2)).float() * scale  # BUG: the product is rounded to q.dtype unscaled
    allowed = allowed_keys(q.shape[2], k.shape[2], batch=q.shape[0], causal=causal, mask=mask)
    if allowed is not None:
        allowed = allowed.expand(s.shape)
        s = s.masked_fill(~allowed, float("-inf"))
    p = torch.softmax(s, -1)
    if allowed is not None:
        p = torch.where(allowed.any(-1, keepdim=True), p, torch.zeros_like(p))
    return (p @ ve.float()).to(q.dtype)
