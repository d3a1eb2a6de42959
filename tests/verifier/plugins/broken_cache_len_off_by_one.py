"""BROKEN (ragged KV cache): element b attends keys j <= L_b, one past its cache length (FlashAttention's
cache_seqlens counts valid keys: j < L_b). Right whenever L_b = Tk, wrong on every ragged batch."""
import sys
from pathlib import Path

from harness import register

sys.path.insert(0, str(Path(__file__).parent))
from _reference import attend, cache_allowed


@register("broken_cache_len_off_by_one", backend="torch", causal=True, gqa=True,
          structures=("bottom_right", "cache_seqlens"))
def broken_cache_len_off_by_one(q, k, v, *, causal=False, mask=None, scale=None, causal_align="top_left",
                                cache_seqlens=None):
    tq, tk = q.shape[-2], k.shape[-2]
    lengths = None if cache_seqlens is None else cache_seqlens.tolist()
    allowed = cache_allowed(tq, tk, lengths, causal=causal, causal_align=causal_align, extra=1)  # BUG: one key too many
    return attend(q, k, v, mask=allowed, scale=scale)
