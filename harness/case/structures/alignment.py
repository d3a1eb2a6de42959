"""Causal alignment: where the diagonal of causal masking (and a window's centre) sits when Tq != Tk.

Top-left (SDPA's ``is_causal``, the default: not a structure) lets query i see keys j <= i; bottom-right
(FlashAttention, chunked prefill, decode) j <= i + Tk - Tq, so the queries are the last Tq positions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from harness.case.structures.base import CallArrays, Structure, StructureKeywords

CAUSAL_ALIGNS = ("top_left", "bottom_right")
"""The values of ``case.causal_align``."""


@dataclass(frozen=True)
class Alignment(Structure):
    """``case.causal_align`` when it is not the default (``top_left``)."""

    causal_align: str

    name: ClassVar[str] = "bottom_right"
    description: ClassVar[str] = ("bottom-right aligned causal masking and windows, passed as "
                                  "causal_align='top_left'|'bottom_right'")
    parameters: ClassVar[tuple[str, ...]] = ("causal_align",)
    defaults: ClassVar[tuple[str, ...]] = ("causal_align='top_left'",)
    field: ClassVar[str | None] = "causal_align"
    context: ClassVar[bool] = True
    within: ClassVar[frozenset[str]] = frozenset({"varlen", "cache_seqlens"})
    sparse: ClassVar[bool] = False

    @classmethod
    def of(cls, case: Any) -> Structure | None:
        return None if case.causal_align == "top_left" else cls(case.causal_align)

    def problem(self, case: Any) -> str | None:
        if self.causal_align not in CAUSAL_ALIGNS:
            return f"causal_align {self.causal_align!r} is not one of {CAUSAL_ALIGNS}"
        if not case.causal and not any(self.name in part.within for part in case.structure_parts):
            return "causal_align='bottom_right' aligns causal masking or a window: set causal=True or a window"
        return None

    def id_parts(self) -> tuple[str, ...]:
        return (self.causal_align,)

    @classmethod
    def native_kwargs(cls, case: Any, arrays: CallArrays, folded: bool) -> dict[str, object]:
        return {"causal_align": "top_left" if folded else case.causal_align}

    def oracle_kwargs(self) -> StructureKeywords:
        return {"causal_align": self.causal_align}
