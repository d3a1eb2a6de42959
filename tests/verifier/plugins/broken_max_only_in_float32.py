"""BROKEN (overflow outside float32): the row max is subtracted in float32 only; bf16/fp16 exp overflows on large logits."""
import torch

from harness import register


@register("broken_max_only_in_float32", backend="torch", dtypes=("float32", "bfloat16", "float16"), causal=True)
def broken_max_only_in_float32(q, k, v, *, causal=False, mask=None, scale=None):
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    s = (q @ k.transpose(-1, -2)) * scale
    if causal:
        s = s.masked_fill(~torch.ones(s.shape[-2:], dtype=torch.bool).tril(), float("-inf"))
    if q.dtype == torch.float32:  # BUG: the low-precision path was "optimised" without the max
        s = s - s.amax(-1, keepdim=True)
    p = torch.exp(s)
    return ((p / p.sum(-1, keepdim=True)) @ v).to(q.dtype)
