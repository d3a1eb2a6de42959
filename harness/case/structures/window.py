"""A sliding window: query i attends keys j with i - left <= j' <= i + right (j' aligned, see :mod:`.alignment`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from harness.case.structures.base import CallArrays, Structure, StructureKeywords


@dataclass(frozen=True)
class Window(Structure):
    """``case.window = (left, right)``; with causal masking, right is 0 in effect."""

    window: tuple[int, int]

    name: ClassVar[str] = "window"
    description: ClassVar[str] = "sliding windows, passed as window=(left, right) or None"
    parameters: ClassVar[tuple[str, ...]] = ("window",)
    defaults: ClassVar[tuple[str, ...]] = ("window=None",)
    field: ClassVar[str | None] = "window"

    def problem(self, case: Any) -> str | None:
        w = self.window
        if isinstance(w, tuple) and len(w) == 2 and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0
                                                        for n in w):
            return None
        return f"window {w!r} must be (left, right), two integers >= 0"

    def id_parts(self) -> tuple[str, ...]:
        w = self.window
        return ("window=" + (",".join(map(str, w)) if isinstance(w, (tuple, list)) else str(w)),)

    @classmethod
    def native_kwargs(cls, case: Any, arrays: CallArrays, folded: bool) -> dict[str, object]:
        return {"window": None if folded else case.window}

    def oracle_kwargs(self) -> StructureKeywords:
        return {"window": self.window}
