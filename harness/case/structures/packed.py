"""Packed variable-length sequences (FlashAttention's ``cu_seqlens``): several sequences along T in a batch of 1.

Block-diagonal: a query attends only its own sequence's keys, with causal masking and a window applied inside
each sequence. ``case.varlen`` holds (query length, key length) per sequence; tq and tk are their sums.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import Any, ClassVar

from harness.case.structures.base import CallArrays, Structure, StructureKeywords


@dataclass(frozen=True)
class Packed(Structure):
    """``case.varlen = ((query length, key length), ...)``."""

    varlen: tuple[tuple[int, int], ...]

    name: ClassVar[str] = "varlen"
    description: ClassVar[str] = ("packed variable-length sequences (batch 1), passed as cu_seqlens_q=, "
                                  "cu_seqlens_k= (None unpacked)")
    parameters: ClassVar[tuple[str, ...]] = ("cu_seqlens_q", "cu_seqlens_k")
    defaults: ClassVar[tuple[str, ...]] = ("cu_seqlens_q=None", "cu_seqlens_k=None")
    field: ClassVar[str | None] = "varlen"
    context: ClassVar[bool] = True
    within: ClassVar[frozenset[str]] = frozenset()

    def problem(self, case: Any) -> str | None:
        pairs = self.varlen
        if not (isinstance(pairs, tuple) and len(pairs) >= 1 and all(
                isinstance(p, tuple) and len(p) == 2 and all(isinstance(n, int) and n >= 0 for n in p) for p in pairs)):
            return "varlen must be ((query length, key length), ...), integers >= 0"
        if case.batch != 1:
            return "packed sequences (varlen) have batch 1"
        if (case.tq, case.tk) != (sum(p[0] for p in pairs), sum(p[1] for p in pairs)):
            return "tq and tk must be the sums of the varlen query and key lengths"
        return None

    def id_parts(self) -> tuple[str, ...]:
        return ("varlen=" + ",".join(str(a) if a == b else f"{a}x{b}" for a, b in self.varlen),)

    @classmethod
    def native_kwargs(cls, case: Any, arrays: CallArrays, folded: bool) -> dict[str, object]:
        """Cumulative query and key lengths (S + 1 each, from 0), or None for an unpacked case."""
        if case.varlen is None:
            return {"cu_seqlens_q": None, "cu_seqlens_k": None}
        cu = [list(accumulate((pair[i] for pair in case.varlen), initial=0)) for i in (0, 1)]
        return {"cu_seqlens_q": arrays.index_array(cu[0], case), "cu_seqlens_k": arrays.index_array(cu[1], case)}

    def oracle_kwargs(self) -> StructureKeywords:
        return {"varlen": self.varlen}

    def segments(self, case: Any) -> Sequence[tuple[int, int]]:
        return self.varlen

    def key_reads(self, case: Any) -> int:
        return int(case.batch * case.tk)
