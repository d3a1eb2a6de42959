"""Structures across calls: a second call with the same shapes and another packing must be answered for itself.

A kernel that builds the mask of packed sequences (or of ragged cache lengths) once and caches it keyed on the
shapes, the totals Tq and Tk, is right on the first call of each shape and wrong on the next batch of a data
loader, which packs other sequences into the same totals. Every case check is a first call of its own shape, so
this property makes the second one: after the case's own calls, the same case with the packing (``varlen``) or
the cache lengths (``cache_seqlens``) changed and the totals kept, checked against the oracle by the output rule.
"""

from __future__ import annotations

from dataclasses import replace

from harness.case.attention import AttentionCase
from harness.contract.registry import Implementation
from harness.verify.checks import PASS, CheckResult, cell, check_output

NAME = "property:restructured"


def _repacked(pairs: tuple[tuple[int, int], ...]) -> tuple[tuple[int, int], ...] | None:
    """Other (query, key) lengths with the same sums: reversed, rotated, else the first sequence split in two."""
    for other in (pairs[::-1], pairs[1:] + pairs[:1]):
        if other != pairs:
            return other
    a, b = pairs[0]
    if a + b < 2:
        return None
    return ((a // 2, b // 2), (a - a // 2, b - b // 2), *pairs[1:])


def _relengthed(lengths: tuple[int, ...], tk: int) -> tuple[int, ...] | None:
    """Other cache lengths for the same capacity: reversed, else each moved by a third of the capacity."""
    if lengths[::-1] != lengths:
        return lengths[::-1]
    moved = tuple((n + tk // 3 + 1) % (tk + 1) for n in lengths)
    return moved if moved != lengths else None


def other_structure(case: AttentionCase) -> AttentionCase | None:
    """``case`` with the same totals and another packing or other cache lengths, or None when it has neither."""
    if case.varlen is not None:
        pairs = _repacked(case.varlen)
        return None if pairs is None else case.with_(varlen=pairs)
    if case.cache_seqlens is not None:
        lengths = _relengthed(case.cache_seqlens, case.tk)
        return None if lengths is None else case.with_(cache_seqlens=lengths)
    return None


def applies(case: AttentionCase) -> bool:
    return other_structure(case) is not None


def restructured(impl: Implementation, case: AttentionCase) -> CheckResult:
    """The output check (one trial) of :func:`other_structure`'s case, called after ``case``'s own calls."""
    other = other_structure(case)
    assert other is not None, "restructured applies to packed or cached cases only"
    result = check_output(impl, other, 1)
    if result.status == PASS:
        return replace(result, check=NAME)
    return cell(NAME, result.status, f"a second call with the same totals and another structure ({other.id}): "
                                     f"{result.reason}", result.metrics)
