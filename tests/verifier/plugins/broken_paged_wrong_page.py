"""BROKEN (paged KV cache): reads every batch element's pages through the first row of the block table
(page p of element 0 instead of element b). Right with one sequence, wrong for any batch of them."""
import sys
from pathlib import Path

from harness import register

sys.path.insert(0, str(Path(__file__).parent))
from _reference import attend, cache_allowed, gather


@register("broken_paged_wrong_page", backend="torch", causal=True, gqa=True,
          structures=("bottom_right", "cache_seqlens", "paged"))
def broken_paged_wrong_page(q, k, v, *, causal=False, mask=None, scale=None, causal_align="top_left",
                            cache_seqlens=None, block_table=None):
    tq = q.shape[-2]
    if block_table is not None:
        wrong = block_table[:1].expand_as(block_table)  # BUG: element 0's pages for everyone
        tk = block_table.shape[1] * k.shape[2]
        k, v = gather(k, wrong, tk), gather(v, wrong, tk)
    tk = k.shape[-2]
    lengths = None if cache_seqlens is None else cache_seqlens.tolist()
    allowed = cache_allowed(tq, tk, lengths, causal=causal, causal_align=causal_align)
    return attend(q, k, v, mask=allowed, scale=scale)
