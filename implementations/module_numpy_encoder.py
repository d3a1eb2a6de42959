"""A Transformer encoder layer in NumPy: attention, residual, LayerNorm, ReLU feed-forward, residual, LayerNorm.

Post-LN (``norm_first=False``, the original Transformer and PyTorch's default) normalises
after each residual add; pre-LN (``norm_first=True``) normalises each sub-layer's input.
Checked against ``nn.TransformerEncoderLayer(activation="relu", dropout=0.0)`` with the
same weights.
"""

from __future__ import annotations

import numpy as np

from harness import register_module
from harness.modules.weights import EncoderLayerWeights
from implementations.module_numpy_mha import linear, numpy_multihead_attention


def layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    """Normalise over the feature axis (the last), biased variance, as ``nn.LayerNorm``."""
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + x.dtype.type(eps)) * weight + bias


def numpy_encoder_layer(x: np.ndarray, *, heads: int, weights: EncoderLayerWeights,
                        mask: np.ndarray | None = None, causal: bool = False) -> np.ndarray:
    w = weights

    def attend(y: np.ndarray) -> np.ndarray:
        return numpy_multihead_attention(y, heads=heads, weights=w.self_attn, mask=mask, causal=causal)

    def feed_forward(y: np.ndarray) -> np.ndarray:
        return linear(np.maximum(linear(y, w.linear1_weight, w.linear1_bias), 0), w.linear2_weight, w.linear2_bias)

    def norm1(y: np.ndarray) -> np.ndarray:
        return layer_norm(y, w.norm1_weight, w.norm1_bias, w.eps)

    def norm2(y: np.ndarray) -> np.ndarray:
        return layer_norm(y, w.norm2_weight, w.norm2_bias, w.eps)

    if w.norm_first:
        x = x + attend(norm1(x))
        return x + feed_forward(norm2(x))
    x = norm1(x + attend(x))
    return norm2(x + feed_forward(x))


register_module("numpy_encoder", backend="numpy", dtypes=("float32", "float64"),
                causal=True, mask=True, layers=("encoder",),
                description="NumPy Transformer encoder layer (post-LN and pre-LN), from scratch")(numpy_encoder_layer)
