"""The textbook formula in NumPy: materialise the full (Tq, Tk) score matrix, softmax, multiply.

It is the baseline everyone writes first, and the O(T^2) memory reference in reports.
float32 inputs stay float32 throughout: the scale and the soft-cap are Python floats or
scalars of q's dtype, never ``np.sqrt(d)``, which NumPy 2 would promote to float64.

The 2025 features in the same few lines: the soft-cap bends the scaled logits before the
mask (Gemma 2); a sink (gpt-oss) joins the row's maximum and its denominator and carries
no value, so a row with no allowed key is exp(-inf) / exp(0) = 0 there; V's own head dim
(DeepSeek MLA) needs nothing, since the scores never see it.
"""

from __future__ import annotations

import numpy as np

from harness import register


def _grouped(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a`` (B, H, R, x) @ ``b`` (B, Hkv, x, y), query head h reading kv head h // (H / Hkv): the H / Hkv query
    heads of a group stacked as rows of one product with their kv head, so K and V are never repeated per query
    head (DeepSeek MLA's decode shares one kv head of 576 dims among 128 query heads: a 128x copy of its cache)."""
    heads, kv_heads = a.shape[1], b.shape[1]
    if heads == kv_heads:
        return np.matmul(a, b)
    batch, rows = a.shape[0], a.shape[2]
    stacked = a.reshape(batch, kv_heads, (heads // kv_heads) * rows, a.shape[-1])
    return np.matmul(stacked, b).reshape(batch, heads, rows, b.shape[-1])


@register("numpy_naive", backend="numpy", memory="quadratic", dtypes=("float32", "float64"),
          causal=True, mask=True, gqa=True, bias=True, sinks=True, softcap=True, value_dim=True,
          description="NumPy softmax(QK^T/sqrt(d))V, materialising the T x T matrix")
def numpy_naive(q: np.ndarray, k: np.ndarray, v: np.ndarray, *, causal: bool = False,
                mask: np.ndarray | None = None, scale: float | None = None,
                bias: np.ndarray | None = None, sinks: np.ndarray | None = None,
                softcap: float | None = None) -> np.ndarray:
    tq, d = q.shape[2], q.shape[3]
    tk = k.shape[2]
    scale = 1.0 / float(d) ** 0.5 if scale is None else float(scale)
    scores = _grouped(q, np.swapaxes(k, -1, -2)) * q.dtype.type(scale)
    if softcap is not None:  # Gemma 2: on the scaled logits, before the mask
        cap = q.dtype.type(softcap)
        scores = np.tanh(scores / cap) * cap
    if bias is not None:  # additive (ALiBi), broadcastable to (B, H, Tq, Tk)
        scores = scores + bias.astype(q.dtype, copy=False)
    allowed = None
    if causal:
        allowed = np.tril(np.ones((tq, tk), dtype=bool))
    if mask is not None:
        allowed = mask if allowed is None else (allowed & mask)
    if allowed is not None:
        allowed = np.broadcast_to(allowed, scores.shape)
        scores = np.where(allowed, scores, -np.inf)
    row_max = scores.max(axis=-1, keepdims=True)
    sink = None if sinks is None else np.asarray(sinks, dtype=q.dtype).reshape(1, -1, 1, 1)
    if sink is not None:  # the sink's logit counts towards the row's maximum, so exp never overflows
        row_max = np.maximum(row_max, sink)
    row_max = np.where(np.isfinite(row_max), row_max, 0).astype(q.dtype, copy=False)
    weights = np.exp(scores - row_max)
    total = weights.sum(axis=-1, keepdims=True)
    if sink is not None:  # its share of the denominator; it carries no value
        total = total + np.exp(sink - row_max)
    weights /= np.where(total > 0, total, 1).astype(q.dtype, copy=False)
    return _grouped(weights, v)
