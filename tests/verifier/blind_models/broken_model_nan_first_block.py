"""BROKEN (after a PyTorch CPU flash-attention bug): key blocks of 512; a row whose whole first block is masked
computes exp(-inf - -inf) = NaN for it and carries the NaN on, although later keys are allowed. Rows with no key
at all are special-cased to zeros, so short masks and empty rows pass."""
import sys
from pathlib import Path

from harness import register

sys.path.insert(0, str(Path(__file__).parent))
from _core_model import allowed_keys, online


@register("broken_model_nan_first_block", backend="torch", dtypes=("float32", "bfloat16"), causal=True, mask=True,
          gqa=True)
def broken_model_nan_first_block(q, k, v, *, causal=False, mask=None, scale=None):
    allowed = allowed_keys(q.shape[2], k.shape[2], batch=q.shape[0], causal=causal, mask=mask)
    out = online(q, k, v, allowed, scale, block=512, guard=False)
    if allowed is None:
        return out
    empty = ~allowed.expand(*q.shape[:3], k.shape[2]).any(-1, keepdim=True)
    return out.masked_fill(empty, 0.0)
