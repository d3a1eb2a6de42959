"""BROKEN (NumPy 2 promotion): dividing by np.sqrt(d) turns float32 scores into float64, and the output too."""
import numpy as np

from harness import register


@register("broken_numpy_promotes", backend="numpy", dtypes=("float32",))
def broken_numpy_promotes(q, k, v, *, causal=False, mask=None, scale=None):
    s = q @ np.swapaxes(k, -1, -2)
    s = s / np.sqrt(q.shape[-1]) if scale is None else s * scale  # BUG: np.float64 promotes to float64
    w = np.exp(s - s.max(-1, keepdims=True))
    return (w / w.sum(-1, keepdims=True)) @ v
