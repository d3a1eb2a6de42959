"""The classic from-scratch multi-head attention in NumPy: project, split heads, attend, merge, project.

This is ``multihead_attention(X, mask, heads, W_KQV, W_out)`` as tutorials write it, with the
weights in PyTorch's layout so that it can be checked against ``nn.MultiheadAttention``
number for number. float32 stays float32: scales are Python floats (NumPy 2 would promote
``x / np.sqrt(d)`` to float64).
"""

from __future__ import annotations

import numpy as np

from harness import register_module
from harness.modules.weights import MultiheadWeights


def linear(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    """``x W^T + b``, PyTorch's ``F.linear``."""
    y = x @ weight.T
    return y if bias is None else y + bias


def rope_numpy(x: np.ndarray, convention: str, base: float = 10000.0, offset: int = 0) -> np.ndarray:
    """Rotate (B, H, T, d) at positions offset .. offset + T - 1 with cos/sin tables: ``x*cos + swap(x)*sin``."""
    t, d = x.shape[-2], x.shape[-1]
    angles = np.arange(offset, offset + t, dtype=np.float64)[:, None] * base ** (-np.arange(0, d, 2, dtype=np.float64) / d)
    if convention == "interleaved":  # pairs (2i, 2i+1): swap(x) = (-x1, x0, -x3, x2, ...)
        angles = np.repeat(angles, 2, axis=-1)
        swapped = np.stack([-x[..., 1::2], x[..., 0::2]], axis=-1).reshape(x.shape)
    elif convention == "rotate_half":  # pairs (i, i + d/2): swap(x) = (-x_hi, x_lo)
        angles = np.concatenate([angles, angles], axis=-1)
        swapped = np.concatenate([-x[..., d // 2:], x[..., : d // 2]], axis=-1)
    else:
        raise ValueError(f"unknown RoPE convention {convention!r}")
    cos, sin = np.cos(angles).astype(x.dtype), np.sin(angles).astype(x.dtype)
    return x * cos + swapped * sin


def softmax_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, allowed: np.ndarray | None,
                      bias: np.ndarray | None) -> np.ndarray:
    """softmax(q k^T / sqrt(d) + bias, masked) v on (B, H, T, d); rows with no allowed key are 0."""
    scores = (q @ np.swapaxes(k, -1, -2)) * q.dtype.type(1.0 / float(q.shape[-1]) ** 0.5)
    if bias is not None:
        scores = scores + bias
    if allowed is not None:
        scores = np.where(allowed, scores, -np.inf)
    row_max = scores.max(axis=-1, keepdims=True)
    weights = np.exp(scores - np.where(np.isfinite(row_max), row_max, 0).astype(q.dtype))
    total = weights.sum(axis=-1, keepdims=True)
    return (weights / np.where(total > 0, total, 1).astype(q.dtype)) @ v


def allowed_keys(t: int, mask: np.ndarray | None, causal: bool, past: int = 0) -> np.ndarray | None:
    """(B or 1, 1, T, past + T) True = query i may read key j: key padding and/or causal (bottom-right: the
    ``past`` cached keys are before every new query)."""
    allowed = np.tril(np.ones((t, past + t), dtype=bool), past)[None, None] if causal else None
    if mask is not None:
        padding = mask[:, None, None, :]
        allowed = padding if allowed is None else (allowed & padding)
    return allowed


def numpy_multihead_attention(x: np.ndarray, *, heads: int, weights: MultiheadWeights,
                              mask: np.ndarray | None = None, causal: bool = False,
                              bias: np.ndarray | None = None, rope: str | None = None, kv_heads: int | None = None,
                              past_key: np.ndarray | None = None, past_value: np.ndarray | None = None) -> np.ndarray:
    b, t, d_model = x.shape
    head_dim, kv_heads = d_model // heads, kv_heads or heads
    kv = kv_heads * head_dim
    qkv = linear(x, weights.in_proj_weight, weights.in_proj_bias)          # (B, T, D + 2 Dkv): Q, K, V
    q = qkv[..., :d_model].reshape(b, t, heads, head_dim).transpose(0, 2, 1, 3)        # (B, H, T, d)
    k, v = (qkv[..., d_model + i * kv:d_model + (i + 1) * kv].reshape(b, t, kv_heads, head_dim).transpose(0, 2, 1, 3)
            for i in range(2))                                               # (B, Hkv, T, d)
    past = 0 if past_key is None else past_key.shape[2]
    if rope:
        q, k = rope_numpy(q, rope, offset=past), rope_numpy(k, rope, offset=past)
    if past_key is not None and past_value is not None:
        k, v = np.concatenate([past_key, k], axis=2), np.concatenate([past_value, v], axis=2)
    k, v = (np.repeat(y, heads // kv_heads, axis=1) for y in (k, v))        # query head h reads KV head h // group
    out = softmax_attention(q, k, v, allowed_keys(t, mask, causal, past), bias)
    out = out.transpose(0, 2, 1, 3).reshape(b, t, d_model)
    return linear(out, weights.out_proj_weight, weights.out_proj_bias)


register_module("numpy_mha", backend="numpy", dtypes=("float32", "float64"),
                causal=True, mask=True, bias=True, gqa=True,
                layers=("mha",), rope=("rotate_half", "interleaved"), kv_cache=True,
                description="NumPy multi-head attention with projections, from scratch (GQA, KV cache)")(numpy_multihead_attention)
