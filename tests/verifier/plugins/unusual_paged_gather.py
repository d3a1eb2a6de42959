"""UNUSUAL but correct: takes ragged and paged caches natively by gathering the pages into a contiguous
cache and attending under a per-element mask (what the oracle does, in the case's dtype)."""
import sys
from pathlib import Path

from harness import register

sys.path.insert(0, str(Path(__file__).parent))
from _reference import attend, cache_allowed, gather


@register("unusual_paged_gather", backend="torch", causal=True, gqa=True,
          structures=("bottom_right", "cache_seqlens", "paged"))
def unusual_paged_gather(q, k, v, *, causal=False, mask=None, scale=None, causal_align="top_left",
                         cache_seqlens=None, block_table=None):
    tq = q.shape[-2]
    if block_table is not None:
        tk = block_table.shape[1] * k.shape[2]
        k, v = gather(k, block_table, tk), gather(v, block_table, tk)
    tk = k.shape[-2]
    lengths = None if cache_seqlens is None else cache_seqlens.tolist()
    allowed = cache_allowed(tq, tk, lengths, causal=causal, causal_align=causal_align)
    return attend(q, k, v, mask=allowed, scale=scale)
