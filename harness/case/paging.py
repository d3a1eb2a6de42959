"""Building a paged KV cache for a case: the keys of each sequence cut into pages, the pages shuffled.

vLLM's PagedAttention and FlashAttention's ``block_table`` keep the cache in a pool of fixed-size
pages; a sequence's pages are wherever the allocator put them. The harness lays the case's K and V
out that way, so a kernel that declares ``structures=("paged",)`` is verified and timed on the
layout it claims to read: the pool is in random order, holds a spare page no sequence uses, and
the unused tail of each sequence's last page is filled with draws no query may attend (a kernel
that reads past the cache length reads numbers, not zeros). The oracle gathers the pages back
(:func:`gather_pages`) and attends the result.
"""

from __future__ import annotations

import torch

SPARE_PAGES = 1


def make_pages(k: torch.Tensor, v: torch.Tensor, page_size: int, gen: torch.Generator
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``k`` (B, Hkv, Tk, d) and ``v`` (B, Hkv, Tk, dv) as page pools (num_pages, Hkv, page_size, d) and
    (num_pages, Hkv, page_size, dv), each in its own head dim, and the int32 block table (B, ceil(Tk / page_size)):
    page ``block_table[b, p]`` holds keys ``p * page_size ...`` of element b in both pools."""
    b, hkv, tk, _ = k.shape
    per_seq = -(-tk // page_size)
    count = b * per_seq + SPARE_PAGES
    order = torch.randperm(count, generator=gen)[: b * per_seq]
    pools = []
    for x in (k, v):
        d = x.shape[-1]  # V's head dim may differ from K's (DeepSeek MLA)
        pool = torch.randn(count, hkv, page_size, d, generator=gen, dtype=torch.float64).to(x.dtype)
        padded = torch.cat([x, pool.new_zeros(b, hkv, per_seq * page_size - tk, d)], dim=2) if per_seq * page_size > tk else x
        pages = padded.reshape(b, hkv, per_seq, page_size, d).transpose(1, 2).reshape(b * per_seq, hkv, page_size, d)
        if per_seq * page_size > tk:  # the last page's unused tail keeps its random draws
            tail = pool[order.view(b, per_seq)[:, -1]][:, :, tk - (per_seq - 1) * page_size:].clone()
            pages.view(b, per_seq, hkv, page_size, d)[:, -1, :, tk - (per_seq - 1) * page_size:] = tail
        pool[order] = pages
        pools.append(pool)
    return pools[0], pools[1], order.view(b, per_seq).to(torch.int32)


def gather_pages(pages: torch.Tensor, block_table: torch.Tensor, tk: int) -> torch.Tensor:
    """A paged cache (num_pages, Hkv, page_size, d) read through ``block_table`` (B, pages per sequence)
    as the contiguous (B, Hkv, Tk, d) it stands for: the oracle's view of what a paged kernel must read."""
    table = torch.as_tensor(block_table).to(torch.long)
    gathered = pages[table.reshape(-1)]  # (B * P, Hkv, page, d)
    b, per_seq = table.shape
    _, hkv, page, d = pages.shape
    return gathered.view(b, per_seq, hkv, page, d).transpose(1, 2).reshape(b, hkv, per_seq * page, d)[:, :, :tk]


def page_rows(rows: torch.Tensor, block_table: torch.Tensor, pool: torch.Tensor) -> torch.Tensor:
    """Values kept per key, ``rows`` (B, Hkv, Tk) (an FP8 cache's per-token scales), laid out as the keys are in a
    paged cache: a copy of ``pool`` (num_pages, Hkv, page_size) with page ``block_table[b, p]`` holding the values
    of keys ``p * page_size ...`` of element b; the slots no key uses keep ``pool``'s values."""
    b, hkv, tk = rows.shape
    page, per_seq = pool.shape[2], block_table.shape[1]
    table = torch.as_tensor(block_table).to(torch.long)
    out = pool.clone()
    padded = torch.cat([rows, rows.new_zeros(b, hkv, per_seq * page - tk)], dim=2) if per_seq * page > tk else rows
    out[table.reshape(-1)] = padded.reshape(b, hkv, per_seq, page).transpose(1, 2).reshape(b * per_seq, hkv, page)
    used = tk - (per_seq - 1) * page
    last = table[:, -1]
    out[last, :, used:] = pool[last, :, used:]
    return out
