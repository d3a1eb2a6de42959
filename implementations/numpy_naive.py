"""The textbook formula in NumPy: materialise the full (Tq, Tk) score matrix, softmax, multiply.

It is the baseline everyone writes first, and the O(T^2) memory reference in reports.
float32 inputs stay float32 throughout: the scale is a Python float, never ``np.sqrt(d)``,
which NumPy 2 would promote to float64.
"""

from __future__ import annotations

import numpy as np

from harness import register


@register("numpy_naive", backend="numpy", memory="quadratic", dtypes=("float32", "float64"),
          causal=True, mask=True, gqa=True, bias=True,
          description="NumPy softmax(QK^T/sqrt(d))V, materialising the T x T matrix")
def numpy_naive(q: np.ndarray, k: np.ndarray, v: np.ndarray, *, causal: bool = False,
                mask: np.ndarray | None = None, scale: float | None = None,
                bias: np.ndarray | None = None) -> np.ndarray:
    heads, tq, d = q.shape[1], q.shape[2], q.shape[3]
    tk = k.shape[2]
    groups = heads // k.shape[1]
    if groups > 1:  # query head h reads kv head h // groups
        k, v = np.repeat(k, groups, axis=1), np.repeat(v, groups, axis=1)
    scale = 1.0 / float(d) ** 0.5 if scale is None else float(scale)
    scores = np.matmul(q, np.swapaxes(k, -1, -2)) * q.dtype.type(scale)
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
    row_max = np.where(np.isfinite(row_max), row_max, 0).astype(q.dtype, copy=False)
    weights = np.exp(scores - row_max)
    total = weights.sum(axis=-1, keepdims=True)
    weights /= np.where(total > 0, total, 1).astype(q.dtype, copy=False)
    return np.matmul(weights, v)
