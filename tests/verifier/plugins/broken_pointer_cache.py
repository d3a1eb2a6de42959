"""BROKEN (cache keyed on data pointers): the output is reused when the same buffers come back, new values or not."""
import sys
from pathlib import Path

from harness import register

sys.path.insert(0, str(Path(__file__).parent))
from _reference import attend

_CACHE = {}


@register("broken_pointer_cache", backend="torch", causal=True, mask=True, gqa=True)
def broken_pointer_cache(q, k, v, *, causal=False, mask=None, scale=None):
    key = (q.data_ptr(), k.data_ptr(), v.data_ptr(), tuple(q.shape), causal, scale)  # BUG: values not in the key
    if key not in _CACHE:
        _CACHE[key] = attend(q, k, v, causal=causal, mask=mask, scale=scale)
    return _CACHE[key].clone()
