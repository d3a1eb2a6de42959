"""PyTorch's own modules as a user runs them at inference: ``eval()`` and ``no_grad``.

``nn_mha`` is ``nn.MultiheadAttention(batch_first=True)`` with ``need_weights=False``;
``nn_encoder`` is ``nn.TransformerEncoderLayer(activation="relu", dropout=0.0)``. In eval
mode without autograd PyTorch may take its fused inference fast path
(``_native_multi_head_attention``, ``_transformer_encoder_layer_fwd``), which the
reference (training mode, plain math path) does not: this checks the fast path too.
The weights are loaded in :func:`prepare` (set-up), so only the forward call is timed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from harness import register_module
from harness.modules.weights import EncoderLayerWeights, MultiheadWeights

ALL_DTYPES = ("float64", "float32", "bfloat16", "float16")


def _masks(x: torch.Tensor, heads: int, mask: torch.Tensor | None, causal: bool,
           bias: torch.Tensor | None) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """attnbench's masks (True = may attend) in PyTorch's conventions (True = may NOT attend)."""
    b, t = x.shape[0], x.shape[1]
    attn_mask = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1) if causal else None
    padding = None if mask is None else ~mask
    if bias is not None:  # additive: (B*H, T, T) float, causal folded in as -inf, padding made float too
        additive = bias.expand(b, heads, t, t).reshape(b * heads, t, t)
        attn_mask = additive if attn_mask is None else additive.masked_fill(attn_mask, float("-inf"))
        if padding is not None:
            padding = torch.zeros(padding.shape, dtype=x.dtype, device=x.device).masked_fill(padding, float("-inf"))
    return attn_mask, padding


@register_module("nn_mha", backend="torch", dtypes=ALL_DTYPES, devices=("cpu", "cuda"),
                 causal=True, mask=True, bias=True, prepare=True, layers=("mha",),
                 description="nn.MultiheadAttention (eval, no_grad: PyTorch's inference path)")
def nn_mha(x: torch.Tensor, *, heads: int, weights: MultiheadWeights, mask: torch.Tensor | None = None,
           causal: bool = False, bias: torch.Tensor | None = None) -> Callable[[], torch.Tensor]:
    mha = torch.nn.MultiheadAttention(x.shape[-1], heads, bias=weights.in_proj_bias is not None,
                                      batch_first=True, dtype=x.dtype, device=x.device)
    weights.load_into(mha)
    mha.eval()
    attn_mask, padding = _masks(x, heads, mask, causal, bias)

    def run() -> torch.Tensor:
        with torch.no_grad():
            return mha(x, x, x, key_padding_mask=padding, attn_mask=attn_mask, need_weights=False)[0]
    return run


@register_module("nn_encoder", backend="torch", dtypes=ALL_DTYPES, devices=("cpu", "cuda"),
                 causal=True, mask=True, prepare=True, layers=("encoder",),
                 description="nn.TransformerEncoderLayer, ReLU, dropout 0 (eval, no_grad)")
def nn_encoder(x: torch.Tensor, *, heads: int, weights: EncoderLayerWeights, mask: torch.Tensor | None = None,
               causal: bool = False) -> Callable[[], Any]:
    d_model, dim_ff = x.shape[-1], weights.linear1_weight.shape[0]
    layer = torch.nn.TransformerEncoderLayer(
        d_model, heads, dim_feedforward=dim_ff, dropout=0.0, activation="relu", layer_norm_eps=weights.eps,
        batch_first=True, norm_first=weights.norm_first, dtype=x.dtype, device=x.device)
    weights.load_into(layer)
    layer.eval()
    attn_mask, padding = _masks(x, heads, mask, causal, None)

    def run() -> torch.Tensor:
        with torch.no_grad():
            return layer(x, src_mask=attn_mask, src_key_padding_mask=padding)
    return run
