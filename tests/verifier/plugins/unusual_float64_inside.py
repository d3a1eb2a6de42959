"""CORRECT but unusual: computes everything in float64 and casts the result back to q's dtype."""
import torch

from harness import register


@register("unusual_float64_inside", backend="torch", dtypes=("float32", "float16", "bfloat16"),
          causal=True, mask=True, gqa=True)
def unusual_float64_inside(q, k, v, *, causal=False, mask=None, scale=None):
    g = q.shape[1] // k.shape[1]
    q64, k64, v64 = q.double(), k.double().repeat_interleave(g, 1), v.double().repeat_interleave(g, 1)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    s = (q64 @ k64.transpose(-1, -2)) * scale
    allowed = torch.ones(s.shape[-2:], dtype=torch.bool).tril() if causal else None
    if mask is not None:
        allowed = mask if allowed is None else allowed & mask
    if allowed is not None:
        s = s.masked_fill(~allowed, float("-inf"))
    return (torch.softmax(s, -1).nan_to_num(0.0) @ v64).to(q.dtype)
