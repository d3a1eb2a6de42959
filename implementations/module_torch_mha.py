"""Multi-head attention with projections from scratch in PyTorch (F.linear, view, matmul, softmax).

The PyTorch twin of ``numpy_mha``: what people write in a model before reaching for
``nn.MultiheadAttention``. Runs in the inputs' dtype on their device; no fused kernels.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from harness import register
from harness.modules.weights import MultiheadWeights


def rope_torch(x: torch.Tensor, convention: str, base: float = 10000.0) -> torch.Tensor:
    """Rotate (B, H, T, d) by position: ``x*cos + swap(x)*sin`` (tables in float64, applied in x's dtype)."""
    t, d = x.shape[-2], x.shape[-1]
    inv_freq = base ** (-torch.arange(0, d, 2, dtype=torch.float64, device=x.device) / d)
    angles = torch.arange(t, dtype=torch.float64, device=x.device)[:, None] * inv_freq
    if convention == "interleaved":
        angles = angles.repeat_interleave(2, dim=-1)
        swapped = torch.stack([-x[..., 1::2], x[..., 0::2]], dim=-1).flatten(-2)
    elif convention == "rotate_half":
        angles = torch.cat([angles, angles], dim=-1)
        swapped = torch.cat([-x[..., d // 2:], x[..., : d // 2]], dim=-1)
    else:
        raise ValueError(f"unknown RoPE convention {convention!r}")
    return x * angles.cos().to(x.dtype) + swapped * angles.sin().to(x.dtype)


@register("torch_mha", backend="torch", dtypes=("float64", "float32", "bfloat16", "float16"),
          devices=("cpu", "cuda"), kind="module", causal=True, mask=True, bias=True,
          options={"layers": ("mha",), "rope": ("rotate_half", "interleaved")},
          description="PyTorch multi-head attention with projections, from scratch")
def torch_multihead_attention(x: torch.Tensor, *, heads: int, weights: MultiheadWeights,
                              mask: torch.Tensor | None = None, causal: bool = False,
                              bias: torch.Tensor | None = None, rope: str | None = None) -> torch.Tensor:
    b, t, d_model = x.shape
    q, k, v = F.linear(x, weights.in_proj_weight, weights.in_proj_bias).chunk(3, dim=-1)
    q, k, v = (y.view(b, t, heads, -1).transpose(1, 2) for y in (q, k, v))
    if rope:
        q, k = rope_torch(q, rope), rope_torch(k, rope)
    scores = q @ k.transpose(-1, -2) * (1.0 / float(q.shape[-1]) ** 0.5)
    if bias is not None:
        scores = scores + bias
    allowed = torch.ones(t, t, dtype=torch.bool, device=x.device).tril() if causal else None
    if mask is not None:
        padding = mask[:, None, None, :]
        allowed = padding if allowed is None else allowed & padding
    if allowed is not None:
        scores = scores.masked_fill(~allowed, float("-inf"))
    out = torch.softmax(scores, dim=-1) @ v
    out = out.transpose(1, 2).reshape(b, t, d_model)
    return F.linear(out, weights.out_proj_weight, weights.out_proj_bias)
