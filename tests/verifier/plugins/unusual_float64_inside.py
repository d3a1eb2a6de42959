"""CORRECT but unusual: computes everything in float64 and casts the result back to q's dtype."""
import sys
from pathlib import Path

from harness import register

sys.path.insert(0, str(Path(__file__).parent))
from _reference import masked_scores, repeat_kv


@register("unusual_float64_inside", backend="torch", dtypes=("float32", "float16", "bfloat16"),
          causal=True, mask=True, gqa=True)
def unusual_float64_inside(q, k, v, *, causal=False, mask=None, scale=None):
    q64 = q.double()
    k64, v64 = repeat_kv(q64, k.double(), v.double())
    s = masked_scores(q64, k64, causal=causal, mask=mask, scale=scale)
    return (s.softmax(-1).nan_to_num(0.0) @ v64).to(q.dtype)
