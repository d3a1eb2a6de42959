"""BROKEN: V is read with K's strides (a launcher passes k.stride() for both cache tensors). Right whenever K and
V share a layout, as a harness that lays out q, k and v alike always has them."""
import sys
from pathlib import Path

import torch

from harness import register

sys.path.insert(0, str(Path(__file__).parent))
from _core_model import allowed_keys, plain


@register("broken_model_v_with_k_strides", backend="torch", dtypes=("float32",), causal=True, mask=True, gqa=True)
def broken_model_v_with_k_strides(q, k, v, *, causal=False, mask=None, scale=None):
    v = torch.as_strided(v, v.shape, k.stride(), v.storage_offset())  # BUG
    allowed = allowed_keys(q.shape[2], k.shape[2], batch=q.shape[0], causal=causal, mask=mask)
    return plain(q, k, v, allowed, scale)
