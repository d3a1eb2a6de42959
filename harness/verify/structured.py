"""Structures as an axis: the structure kinds the covering array and the fuzzer cross with every other axis.

A structure (a sliding window, bottom-right alignment, packed sequences, ragged cache lengths, a paged
cache) is not a feature to test once on a default case: a bug in it often needs a second condition
(a non-default scale, a strided view, a mask, a dtype, Tq < Tk). So each kind below is one value of
the ``structure`` axis, and :func:`apply_structure` turns it into case fields sized to the row it
lands in (its Tq, Tk, batch and causal flag), reaching the edges each structure has:

- ``window``: both sides, top-left; ``window_left``: right side 0; ``window_br``: both sides,
  bottom-right aligned (FlashAttention's convention when Tq != Tk); ``causal_br``: bottom-right causal.
- ``varlen``: packed sequences of unequal lengths, one without queries, one with queries but no key
  (rows that see nothing), one long; ``varlen_br``: the same, causal bottom-right inside each sequence.
- ``cache``: ragged cache lengths, a third of the capacity Tk and full; ``cache_window``: one short of
  capacity and a zero length, under a window (cache rows are bottom-right causal when the row is causal).
- ``paged``: a paged cache whose page size does not divide Tk, with ragged lengths (the block table
  holds more pages than a short sequence needs); ``paged_div``: a page size that divides Tk.

:func:`structure_kinds` keeps the kinds an implementation can express (natively, or as a dense mask
when it takes masks; pages only natively); :func:`structure_label` maps any case back to its kind,
for coverage.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from harness.case.attention import CaseFields
from harness.contract.conventions import KEY_PADDING_MASKS
from harness.contract.registry import Implementation

KINDS = ("none", "window", "window_left", "window_br", "causal_br", "varlen", "varlen_br", "cache", "cache_window",
         "cache_tl", "paged", "paged_div")
"""Simplest first (the fuzzer shrinks toward the front)."""
NEEDS: dict[str, frozenset[str]] = {
    "none": frozenset(), "window": frozenset({"window"}), "window_left": frozenset({"window"}),
    "window_br": frozenset({"window", "bottom_right"}), "causal_br": frozenset({"bottom_right"}),
    "varlen": frozenset({"varlen"}), "varlen_br": frozenset({"varlen", "bottom_right"}),
    "cache": frozenset({"cache_seqlens"}), "cache_window": frozenset({"cache_seqlens", "window"}),
    "cache_tl": frozenset({"cache_seqlens"}),
    "paged": frozenset({"cache_seqlens", "paged"}), "paged_div": frozenset({"cache_seqlens", "paged"}),
}
NEEDS_CAUSAL = frozenset({"causal_br", "varlen_br", "cache_tl"})
"""Bottom-right alignment without a window aligns causal masking: these kinds need a causal row (``cache_tl``: a
KV cache under top-left causal masking, asked for explicitly, where a cache path may assume bottom-right)."""
BATCH_ONE = frozenset({"varlen", "varlen_br"})
"""Packed sequences come in a batch of 1."""
FORWARD_ONLY = frozenset({"paged", "paged_div"})
"""A paged KV cache is forward-only."""
FOLDABLE = frozenset({"window", "bottom_right", "varlen", "cache_seqlens"})
"""Structures the harness can fold into a dense mask for an implementation that takes masks."""


def expressible(impl: Implementation) -> frozenset[str]:
    """Structures ``impl`` can be given: those it declares, and the foldable ones when it takes dense masks (a
    kernel that takes (B, Tk) key-padding masks has nowhere to fold a structure into)."""
    folds = impl.declared.mask and impl.declared.conventions.mask_kind != "key_padding"
    return frozenset(impl.declared.structures) | (FOLDABLE if folds else frozenset())


def masks_taken(impl: Implementation, kinds: Sequence[str], ranks: Sequence[str]
                ) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The mask kinds and ranks (of ``kinds`` and ``ranks``, in their order) a case can give ``impl``: none but
    "none" and "full" when it takes no mask, those that reduce to (B, Tk) booleans when it takes key padding
    (:data:`~harness.contract.conventions.KEY_PADDING_MASKS`, full rank), else all."""
    if not impl.declared.mask:
        return ("none",), ("full",)
    if impl.declared.conventions.mask_kind == "key_padding":
        return tuple(k for k in kinds if k == "none" or k in KEY_PADDING_MASKS), ("full",)
    return tuple(kinds), tuple(ranks)


def structure_kinds(impl: Implementation) -> list[str]:
    """The kinds ``impl`` can express, in :data:`KINDS` order (``none`` always)."""
    can = expressible(impl)
    return [kind for kind in KINDS if NEEDS[kind] <= can and (impl.declared.causal or kind not in NEEDS_CAUSAL)
            and (kind != "cache_tl" or "bottom_right" in can)]  # without bottom-right, every causal cache is top-left


def invalid(kind: str, *, causal: bool, batch: int, grad: bool) -> str | None:
    """Why ``kind`` cannot sit in a row with these values, or None."""
    if kind in NEEDS_CAUSAL and not causal:
        return "needs causal"
    if kind in BATCH_ONE and batch != 1:
        return "needs batch 1"
    if kind in FORWARD_ONLY and grad:
        return "forward only"
    return None


def _split(total: int, shares: tuple[int, ...]) -> list[int]:
    """``total`` cut into parts proportional to ``shares`` (a 0 share stays 0), summing to ``total``."""
    parts = [total * s // sum(shares) for s in shares]
    longest = max(range(len(shares)), key=lambda i: shares[i])
    parts[longest] += total - sum(parts)
    return parts


def packed_lengths(tq: int, tk: int) -> tuple[tuple[int, int], ...]:
    """Four sequences summing to (tq, tk): short and unequal, no queries, long, queries with no key."""
    qs, ks = _split(tq, (1, 0, 5, 1)), _split(tk, (2, 1, 5, 0))
    return tuple(zip(qs, ks))


def _window(tk: int, right: bool) -> tuple[int, int]:
    return (tk // 3 + 1, tk // 5 + 1 if right else 0)


def _page_not_dividing(tk: int) -> int:
    return next(p for p in (16, 12, 7, 5, tk + 1) if tk % p)


def _page_dividing(tk: int) -> int:
    return next(p for p in (16, 8, 4, 2, 1) if tk % p == 0)


def apply_structure(kind: str, fields: CaseFields, can: frozenset[str] = FOLDABLE | {"paged"}) -> CaseFields:
    """``fields`` (batch, tq, tk, causal, ...) with the structure ``kind`` added, sized to them.

    ``can`` is what the implementation can express: a cache under a causal row is bottom-right aligned
    (the decode convention) when it can take that."""
    out = fields.copy()
    tq, tk, batch = out.get("tq", 16), out.get("tk", 0) or out.get("tq", 16), out.get("batch", 1)
    if kind in ("window", "window_left", "window_br"):
        out["window"] = _window(tk, right=kind != "window_left")
        if kind == "window_br":
            out["causal_align"] = "bottom_right"
    elif kind == "causal_br":
        out["causal_align"] = "bottom_right"
    elif kind in BATCH_ONE:
        out.update({"batch": 1, "varlen": packed_lengths(tq, tk), "tq": tq, "tk": tk})
        if kind == "varlen_br":
            out["causal_align"] = "bottom_right"
    elif kind in ("cache", "cache_window", "cache_tl", "paged", "paged_div"):
        short, ragged = max(tk - 1, 1), min(tk // 3 + 1, tk)
        patterns = {"cache": (ragged, tk), "cache_window": (short, 0), "cache_tl": (tk, ragged), "paged": (ragged, tk),
                    "paged_div": None}
        pattern = patterns[kind]
        if pattern is not None:
            out["cache_seqlens"] = tuple((pattern * batch)[:batch]) if batch > 1 else (pattern[0],)
        if kind == "cache_window":
            out["window"] = _window(tk, right=True)
        if kind in FORWARD_ONLY:
            out["page_size"] = _page_not_dividing(tk) if kind == "paged" else _page_dividing(tk)
        if out.get("causal") and "bottom_right" in can and kind != "cache_tl":
            out["causal_align"] = "bottom_right"
    return out


def structure_label(case: Any, can: frozenset[str] = FOLDABLE) -> str:
    """The kind of :data:`KINDS` a case's structure is (the inverse of :func:`apply_structure`, for coverage), for
    an implementation that can express ``can`` (a causal cache is ``cache_tl`` only where bottom-right exists)."""
    br = case.causal_align == "bottom_right"
    if case.page_size is not None:
        return "paged" if case.tk % case.page_size else "paged_div"
    if case.cache_seqlens is not None:
        if case.window is not None:
            return "cache_window"
        return "cache_tl" if case.causal and not br and "bottom_right" in can else "cache"
    if case.varlen is not None:
        return "varlen_br" if br else "varlen"
    if case.window is not None:
        return "window_br" if br else ("window_left" if case.window[1] == 0 else "window")
    return "causal_br" if br else "none"
