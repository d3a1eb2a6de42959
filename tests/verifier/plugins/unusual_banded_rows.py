"""CORRECT but unusual: takes windows and bottom-right alignment natively and never builds a (Tq, Tk) mask
for them: each query row attends only the contiguous key range [lo, hi) its structure leaves it."""
import numpy as np

from harness import register


@register("unusual_banded_rows", backend="numpy", dtypes=("float32", "float64"), causal=True, mask=True, gqa=True,
          structures=("window", "bottom_right"))
def unusual_banded_rows(q, k, v, *, causal=False, mask=None, scale=None, window=None, causal_align="top_left"):
    b, h, tq, d = q.shape
    tk, g = k.shape[2], h // k.shape[1]
    scale = q.dtype.type(1.0 / float(d) ** 0.5 if scale is None else scale)
    offset = tk - tq if causal_align == "bottom_right" else 0
    allowed = None if mask is None else np.broadcast_to(mask, (b, h, tq, tk))
    out = np.zeros(q.shape, dtype=q.dtype)
    for i in range(tq):
        lo, hi = 0, tk
        if window is not None:
            lo, hi = max(lo, i + offset - window[0]), min(hi, i + offset + window[1] + 1)
        if causal:
            hi = min(hi, i + offset + 1)
        if hi <= lo:
            continue  # no key: the row is zero
        for kv in range(k.shape[1]):
            heads = slice(kv * g, (kv + 1) * g)
            s = q[:, heads, i, None] @ np.swapaxes(k[:, kv, None, lo:hi], -1, -2) * scale  # (b, g, 1, keys)
            if allowed is not None:
                s = np.where(allowed[:, heads, i, None, lo:hi], s, -np.inf)
            top = s.max(-1, keepdims=True)
            w = np.exp(s - np.where(np.isfinite(top), top, 0))
            total = w.sum(-1, keepdims=True)
            out[:, heads, i] = ((w / np.where(total > 0, total, 1)) @ v[:, kv, None, lo:hi])[:, :, 0]
    return out
