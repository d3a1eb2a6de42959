"""BROKEN: on the KV-cache path (cache_seqlens given) causal masking is always aligned bottom-right, the decode
convention, even when top-left is asked. Right without a cache, and with a cache when bottom-right is asked."""
import sys
from pathlib import Path

from harness import register

sys.path.insert(0, str(Path(__file__).parent))
from _core_model import allowed_keys, plain


@register("broken_model_cache_topleft", backend="torch", dtypes=("float32",), causal=True, mask=True, gqa=True,
          structures=("bottom_right", "cache_seqlens"))
def broken_model_cache_topleft(q, k, v, *, causal=False, mask=None, scale=None, causal_align="top_left",
                           cache_seqlens=None):
    if cache_seqlens is not None:
        causal_align = "bottom_right"  # BUG
    allowed = allowed_keys(q.shape[2], k.shape[2], batch=q.shape[0], causal=causal, mask=mask,
                           causal_align=causal_align, cache_seqlens=cache_seqlens)
    return plain(q, k, v, allowed, scale)
