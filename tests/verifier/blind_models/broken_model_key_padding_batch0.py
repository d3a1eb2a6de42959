"""BROKEN: a broadcast key-padding mask (B, 1, 1, Tk) over long key sequences (Tk >= 512) takes a fast path that
reads the padding of batch element 0 for every element. Right when element 0 is the only one padded, when
every element is padded alike, and for short or fully shaped masks."""
import sys
from pathlib import Path

from harness import register

sys.path.insert(0, str(Path(__file__).parent))
from _core_model import allowed_keys, online


@register("broken_model_key_padding_batch0", backend="torch", dtypes=("float32",), causal=True, mask=True, gqa=True)
def broken_model_key_padding_batch0(q, k, v, *, causal=False, mask=None, scale=None):
    if mask is not None and mask.dim() == 4 and mask.shape[1] == 1 and mask.shape[2] == 1 and k.shape[2] >= 512:
        mask = mask[:1]  # BUG: the fast path keeps element 0 only
    allowed = allowed_keys(q.shape[2], k.shape[2], batch=q.shape[0], causal=causal, mask=mask)
    return online(q, k, v, allowed, scale, block=256)
