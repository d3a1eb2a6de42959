"""Decode with a KV cache, as case data: ragged cache lengths per batch element and a paged layout.

A decode step attends Tq new queries (1, 2, 4, 16: one token, or a few of speculative decoding)
against a cache of up to Tk keys per sequence. Two things about the cache are structure, declared
by the implementations that take them natively (``register(structures=("cache_seqlens", "paged"))``):

- ``cache_seqlens`` (FlashAttention's name): batch element b has L_b valid keys, ``j < L_b``. Causal
  masking and a window apply to (Tq, L_b) of each element; bottom-right alignment (the decode
  convention) makes the Tq queries the last L_b positions. An implementation that does not take it
  receives it folded into a dense (B, 1, Tq, Tk) mask, built before timing.
- ``paged`` (vLLM, FlashAttention's ``block_table``): K and V live in pools of pages
  (num_pages, Hkv, page_size, d), shuffled; ``block_table[b, p]`` is the page holding keys
  ``p * page_size ...`` of element b. The harness builds the pages (:mod:`harness.case.paging`) and the
  oracle gathers them back (:func:`harness.case.paging.gather_pages`). An implementation that does not take
  pages receives the same keys contiguous: a layout, not a mask.

This module holds no torch: the decode suites' shapes and the keys a step must read. The two structures
validate and name themselves (:mod:`harness.case.structures.cache`, :mod:`harness.case.structures.paged`).
"""

from __future__ import annotations

import random
from typing import Any

from harness.case.attention import CaseFields

DECODE_TQ = (1, 2, 4, 16)
"""New queries per step: one token; a few (speculative decoding, multi-token prediction)."""


def ragged_lengths(batch: int, tk: int, seed: int = 0, low: float = 0.25) -> tuple[int, ...]:
    """Deterministic ragged cache lengths in [low * tk, tk], the longest exactly tk (the cache capacity)."""
    rng = random.Random(seed)
    lengths = [rng.randint(max(1, int(low * tk)), tk) for _ in range(batch)]
    lengths[rng.randrange(batch)] = tk
    return tuple(lengths)


def decode_fields(batch: int, heads: int, kv_heads: int, tk: int, tq: int = 1, d: int = 128, *,
                  ragged: bool = False, page_size: int | None = None, causal: bool = True,
                  kv_dtype: str | None = None, kv_scales: str | None = None) -> CaseFields:
    """The case fields of one decode step: Tq new queries at the end of each sequence (bottom-right causal),
    the cache stored in ``kv_dtype`` when given (bf16/fp16 caches beside fp32 queries; an FP8 one with scales
    of the layout ``kv_scales``, :mod:`harness.case.quantized`)."""
    fields: CaseFields = {"batch": batch, "heads": heads, "kv_heads": kv_heads, "tq": tq, "tk": tk, "d": d}
    if kv_dtype is not None:
        fields["kv_dtype"] = kv_dtype
    if kv_scales is not None:
        fields["kv_scales"] = kv_scales
    if causal and tq > 1:  # one query sees every cached key anyway: the case stays plain
        fields.update({"causal": True, "causal_align": "bottom_right"})
    if ragged:
        fields["cache_seqlens"] = ragged_lengths(batch, tk, seed=batch * 7919 + tk)
    if page_size is not None:
        fields["page_size"] = page_size
    return fields


def compulsory_keys(case: Any) -> int:
    """Cached keys some query of the case may attend, summed over batch elements (each read once)."""
    lengths = case.cache_seqlens if case.cache_seqlens is not None else (case.tk,) * case.batch
    total = 0
    for n in lengths:
        lo, hi = 0, n
        offset = n - case.tq if case.causal_align == "bottom_right" else 0
        if case.causal:
            hi = min(hi, max(0, case.tq + offset))
        if case.window is not None:
            lo = max(lo, offset - case.window[0])
            hi = min(hi, case.tq - 1 + offset + case.window[1] + 1)
        total += max(0, hi - lo)
    return total
