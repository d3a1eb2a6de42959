"""Ragged KV-cache lengths (FlashAttention's ``cache_seqlens``): batch element b has L_b valid keys, j < L_b.

Causal masking and a window apply to (Tq, L_b) of each element; with bottom-right alignment the Tq new
queries are the last positions of each sequence. See :mod:`harness.case.decode`.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from harness.case.structures.base import CallArrays, Structure, StructureKeywords

CACHE_WITH_VARLEN = "a KV cache (cache_seqlens, page_size) and packed sequences (varlen) do not combine"


@dataclass(frozen=True)
class CacheLengths(Structure):
    """``case.cache_seqlens = (L_0, ..., L_{B-1})``."""

    cache_seqlens: tuple[int, ...]

    name: ClassVar[str] = "cache_seqlens"
    description: ClassVar[str] = ("ragged KV-cache lengths per batch element, passed as cache_seqlens= ((B,) int32 "
                                  "tensor / int64 array; None when every element has all Tk keys)")
    parameters: ClassVar[tuple[str, ...]] = ("cache_seqlens",)
    defaults: ClassVar[tuple[str, ...]] = ("cache_seqlens=None",)
    field: ClassVar[str | None] = "cache_seqlens"
    context: ClassVar[bool] = True
    within: ClassVar[frozenset[str]] = frozenset()

    def problem(self, case: Any) -> str | None:
        lengths = self.cache_seqlens
        if not (isinstance(lengths, tuple) and all(isinstance(n, int) and not isinstance(n, bool) for n in lengths)):
            return f"cache_seqlens {lengths!r} must be a tuple of integers, one per batch element"
        if len(lengths) != case.batch:
            return f"cache_seqlens has {len(lengths)} lengths for batch {case.batch}: one per batch element"
        if any(n < 0 or n > case.tk for n in lengths):
            return f"cache_seqlens {lengths} must lie in 0..tk={case.tk}"
        return CACHE_WITH_VARLEN if case.varlen is not None else None

    def id_parts(self) -> tuple[str, ...]:
        lengths = self.cache_seqlens
        if len(lengths) <= 8:
            return ("cache=" + ",".join(map(str, lengths)),)
        digest = zlib.crc32(",".join(map(str, lengths)).encode()) & 0xFFFFFF
        return (f"cache={min(lengths)}..{max(lengths)}#{digest:06x}",)  # 64 lengths would make an unreadable id

    @classmethod
    def native_kwargs(cls, case: Any, arrays: CallArrays, folded: bool) -> dict[str, object]:
        return {"cache_seqlens": arrays.index_array(case.cache_seqlens, case)}

    def oracle_kwargs(self) -> StructureKeywords:
        return {"cache_seqlens": self.cache_seqlens}

    def segments(self, case: Any) -> Sequence[tuple[int, int]]:
        return [(case.tq, n) for n in self.cache_seqlens]

    def mask_lead(self, case: Any) -> tuple[int, int]:
        return (case.batch, 1)  # the mask is per batch element
