"""CORRECT but unusual: processes queries in chunks of 7 rows (an odd size that never divides T)."""
import numpy as np

from harness import register


@register("unusual_query_chunks", backend="numpy", dtypes=("float32", "float64"), causal=True, mask=True, gqa=True)
def unusual_query_chunks(q, k, v, *, causal=False, mask=None, scale=None):
    b, h, tq, d = q.shape
    g = h // k.shape[1]
    k, v = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)
    scale = q.dtype.type(1.0 / float(d) ** 0.5 if scale is None else scale)
    allowed = np.ones((b, h, tq, k.shape[2]), dtype=bool)
    if causal:
        allowed &= np.tril(np.ones((tq, k.shape[2]), dtype=bool))
    if mask is not None:
        allowed &= mask
    out = np.empty(q.shape, dtype=q.dtype)
    for i in range(0, tq, 7):
        s = np.where(allowed[:, :, i:i + 7], q[:, :, i:i + 7] @ np.swapaxes(k, -1, -2) * scale, -np.inf)
        top = s.max(-1, keepdims=True)
        w = np.exp(s - np.where(np.isfinite(top), top, 0))
        total = w.sum(-1, keepdims=True)
        out[:, :, i:i + 7] = (w / np.where(total > 0, total, 1)) @ v
    return out
