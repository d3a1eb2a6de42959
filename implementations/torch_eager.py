"""Matmul + softmax in eager PyTorch: the formula as people write it in a model, with autograd.

Rows with no allowed key would be NaN after a plain softmax over all -inf; the contract
asks for zeros, so those rows are zeroed explicitly (as SDPA does).

The 2025 features are written as the models' own eager code writes them (transformers'
``eager_attention_forward`` of Gemma 2 and gpt-oss), so this is the readable reference a
kernel author compares against: the soft-cap bends the scaled logits before the mask; a
sink is one more logit column per head, softmaxed with the row and dropped before the
product with V (autograd then gives d sinks); V's own head dim needs nothing, since the
scores never see it. With a sink a row with no allowed key puts all its weight on the
sink and is zero without the explicit zeroing. An FP8 KV cache (``k_scale=``, ``v_scale=``) is dequantized to
q's dtype first, as a model's eager code reads one.
"""

from __future__ import annotations

import torch

from harness import register
from harness.case.dtypes import FP8_DTYPES
from implementations._fp8 import dequantized


def _grouped(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a`` (B, H, R, x) @ ``b`` (B, Hkv, x, y), query head h reading kv head h // (H / Hkv): the H / Hkv query
    heads of a group stacked as rows of one product with their kv head, so K and V are never repeated per query
    head (DeepSeek MLA's decode shares one kv head of 576 dims among 128 query heads: a 128x copy of its cache)."""
    heads, kv_heads = a.shape[1], b.shape[1]
    if heads == kv_heads:
        return torch.matmul(a, b)
    batch, rows = a.shape[0], a.shape[2]
    stacked = a.reshape(batch, kv_heads, (heads // kv_heads) * rows, a.shape[-1])
    return torch.matmul(stacked, b).reshape(batch, heads, rows, b.shape[-1])


@register("torch_eager", backend="torch", memory="quadratic", dtypes=("float64", "float32", "bfloat16", "float16"),
          devices=("cpu", "cuda"), causal=True, mask=True, gqa=True, grad=True, bias=True,
          sinks=True, softcap=True, value_dim=True, kv_dtypes=FP8_DTYPES, kv_scales=("tensor", "head", "token"),
          description="PyTorch matmul + softmax, materialising the T x T matrix; autograd")
def torch_eager(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
                mask: torch.Tensor | None = None, scale: float | None = None,
                bias: torch.Tensor | None = None, sinks: torch.Tensor | None = None,
                softcap: float | None = None, k_scale: torch.Tensor | None = None,
                v_scale: torch.Tensor | None = None) -> torch.Tensor:
    if k_scale is not None:  # an FP8 cache: dequantized to q's dtype, as a model's eager code does
        k, v = dequantized(k, k_scale, q.dtype), dequantized(v, v_scale, q.dtype)
    tq, d = q.shape[2], q.shape[3]
    tk = k.shape[2]
    scale = 1.0 / float(d) ** 0.5 if scale is None else float(scale)
    scores = _grouped(q * scale, k.transpose(-1, -2))  # scaled first: a float16 q.k past 65,504 stays finite
    if softcap is not None:  # Gemma 2: on the scaled logits, before the mask
        scores = torch.tanh(scores / softcap) * softcap
    if bias is not None:  # additive (ALiBi), broadcastable to (B, H, Tq, Tk)
        scores = scores + bias.to(scores.dtype)
    allowed = None
    if causal:
        allowed = torch.ones(tq, tk, dtype=torch.bool, device=q.device).tril()
    if mask is not None:
        allowed = mask if allowed is None else (allowed & mask)
    if allowed is not None:
        scores = scores.masked_fill(~allowed, float("-inf"))
    if sinks is not None:  # gpt-oss: cat([logits, sinks]), softmax, probs[..., :-1]
        column = sinks.to(scores.dtype).reshape(1, -1, 1, 1).expand(*scores.shape[:-1], 1)
        weights = torch.softmax(torch.cat([scores, column], dim=-1), dim=-1)[..., :-1]
        return _grouped(weights, v)
    if allowed is None:
        return _grouped(torch.softmax(scores, dim=-1), v)
    weights = torch.softmax(scores, dim=-1)
    any_allowed = allowed.any(dim=-1, keepdim=True)
    weights = torch.where(any_allowed, weights, torch.zeros((), dtype=weights.dtype, device=weights.device))
    return _grouped(weights, v)
