"""BROKEN: the running maximum of an online softmax starts at a finite sentinel (-50,000) instead of -inf. A row
whose every logit lies far below the sentinel keeps the sentinel as its maximum, exp underflows to 0 for every
key and the row comes out as zeros. Right for every row with one logit above -50,000."""
import sys
from pathlib import Path

from harness import register

sys.path.insert(0, str(Path(__file__).parent))
from _core_model import allowed_keys, online


@register("broken_model_finite_sentinel_max", backend="torch", dtypes=("float32", "bfloat16"), causal=True, mask=True,
          gqa=True)
def broken_model_finite_sentinel_max(q, k, v, *, causal=False, mask=None, scale=None):
    allowed = allowed_keys(q.shape[2], k.shape[2], batch=q.shape[0], causal=causal, mask=mask)
    return online(q, k, v, allowed, scale, block=64, start=-5e4)
