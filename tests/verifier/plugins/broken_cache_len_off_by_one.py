"""BROKEN (ragged KV cache): element b attends keys j <= L_b, one past its cache length (FlashAttention's
cache_seqlens counts valid keys: j < L_b). Right whenever L_b = Tk, wrong on every ragged batch."""
import sys
from pathlib import Path

from harness import register

sys.path.insert(0, str(Path(__file__).parent))
from _reference import attend, band, cache_band


@register("broken_cache_len_off_by_one", backend="torch", causal=True, gqa=True,
          structures=("bottom_right", "cache_seqlens"))
def broken_cache_len_off_by_one(q, k, v, *, causal=False, mask=None, scale=None, causal_align="top_left",
                                cache_seqlens=None):
    tq, tk = q.shape[-2], k.shape[-2]
    if cache_seqlens is None:
        allowed = band(tq, tk, causal=causal, window=None, causal_align=causal_align)
    else:
        allowed = cache_band(tq, tk, cache_seqlens.tolist(), causal=causal, window=None, causal_align=causal_align,
                             extra=1)  # BUG: one key too many
    return attend(q, k, v, mask=allowed, scale=scale)
