"""Multi-head attention with projections from scratch in PyTorch (F.linear, view, matmul, softmax).

The PyTorch twin of ``numpy_mha``: what people write in a model before reaching for
``nn.MultiheadAttention``. Runs in the inputs' dtype on their device; no fused kernels.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from harness import register_module
from harness.modules.weights import MultiheadWeights


def rope_torch(x: torch.Tensor, convention: str, base: float = 10000.0, offset: int = 0) -> torch.Tensor:
    """Rotate (B, H, T, d) at positions offset .. offset + T - 1: ``x*cos + swap(x)*sin`` (tables in float64,
    applied in x's dtype)."""
    t, d = x.shape[-2], x.shape[-1]
    inv_freq = base ** (-torch.arange(0, d, 2, dtype=torch.float64, device=x.device) / d)
    angles = torch.arange(offset, offset + t, dtype=torch.float64, device=x.device)[:, None] * inv_freq
    if convention == "interleaved":
        angles = angles.repeat_interleave(2, dim=-1)
        swapped = torch.stack([-x[..., 1::2], x[..., 0::2]], dim=-1).flatten(-2)
    elif convention == "rotate_half":
        angles = torch.cat([angles, angles], dim=-1)
        swapped = torch.cat([-x[..., d // 2:], x[..., : d // 2]], dim=-1)
    else:
        raise ValueError(f"unknown RoPE convention {convention!r}")
    return x * angles.cos().to(x.dtype) + swapped * angles.sin().to(x.dtype)


@register_module("torch_mha", backend="torch", dtypes=("float64", "float32", "bfloat16", "float16"),
                 devices=("cpu", "cuda"), causal=True, mask=True, bias=True, gqa=True,
                 layers=("mha",), rope=("rotate_half", "interleaved"), kv_cache=True,
                 description="PyTorch multi-head attention with projections, from scratch (GQA, KV cache)")
def torch_multihead_attention(x: torch.Tensor, *, heads: int, weights: MultiheadWeights,
                              mask: torch.Tensor | None = None, causal: bool = False,
                              bias: torch.Tensor | None = None, rope: str | None = None, kv_heads: int | None = None,
                              past_key: torch.Tensor | None = None,
                              past_value: torch.Tensor | None = None) -> torch.Tensor:
    b, t, d_model = x.shape
    head_dim, kv_heads = d_model // heads, kv_heads or heads
    q, k, v = F.linear(x, weights.in_proj_weight, weights.in_proj_bias).split(
        [d_model, kv_heads * head_dim, kv_heads * head_dim], dim=-1)
    q = q.view(b, t, heads, head_dim).transpose(1, 2)
    k, v = (y.view(b, t, kv_heads, head_dim).transpose(1, 2) for y in (k, v))
    past = 0 if past_key is None else past_key.shape[2]
    if rope:
        q, k = rope_torch(q, rope, offset=past), rope_torch(k, rope, offset=past)
    if past_key is not None and past_value is not None:
        k, v = torch.cat([past_key, k], dim=2), torch.cat([past_value, v], dim=2)
    if kv_heads != heads:  # query head h reads KV head h // (heads / kv_heads)
        k, v = (y.repeat_interleave(heads // kv_heads, dim=1) for y in (k, v))
    scores = q @ k.transpose(-1, -2) * (1.0 / float(head_dim) ** 0.5)
    if bias is not None:
        scores = scores + bias
    keys = past + t
    allowed = torch.ones(t, keys, dtype=torch.bool, device=x.device).tril(past) if causal else None  # bottom-right
    if mask is not None:
        padding = mask[:, None, None, :]
        allowed = padding if allowed is None else allowed & padding
    if allowed is not None:
        scores = scores.masked_fill(~allowed, float("-inf"))
    out = torch.softmax(scores, dim=-1) @ v
    out = out.transpose(1, 2).reshape(b, t, d_model)
    return F.linear(out, weights.out_proj_weight, weights.out_proj_bias)
