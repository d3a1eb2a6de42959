"""Structures an implementation may take natively: sliding windows, bottom-right alignment, packed sequences.

What each is called in ``register(structures=...)``, the parameters it brings to the call, and the
reasons a case with a structure is skipped: an implementation that does not declare one gets it
folded into a dense boolean mask (:meth:`harness.tensors.Inputs.kwargs`), which needs ``mask=True``
and a mask within :data:`DENSE_MASK_BUDGET_BYTES`. See README "Structured attention".
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from harness.errors import PluginError

STRUCTURES = {
    "window": "sliding windows, passed as window=(left, right) or None",
    "bottom_right": "bottom-right aligned causal masking and windows, passed as causal_align='top_left'|'bottom_right'",
    "varlen": "packed variable-length sequences (batch 1), passed as cu_seqlens_q=, cu_seqlens_k= (None unpacked)",
    "cache_seqlens": "ragged KV-cache lengths per batch element, passed as cache_seqlens= ((B,) int32 tensor / int64 "
                     "array; None when every element has all Tk keys)",
    "paged": "a paged KV cache: k and v arrive as page pools (num_pages, Hkv, page_size, d) with block_table= "
             "((B, pages per sequence) int32 tensor / int64 array; None and contiguous k, v when not paged) and "
             "always cache_seqlens= (needs 'cache_seqlens' declared too)",
}
"""Structures an implementation may take natively (``register(structures=...)``) -> what it is passed."""
STRUCTURE_PARAMETERS = {"window": ("window",), "bottom_right": ("causal_align",),
                        "varlen": ("cu_seqlens_q", "cu_seqlens_k"), "cache_seqlens": ("cache_seqlens",),
                        "paged": ("block_table",)}
LAYOUT_STRUCTURES = frozenset({"paged"})
"""Structures that are a memory layout, not a mask: undeclared, the implementation gets the same keys contiguous."""
DENSE_MASK_BUDGET_BYTES = 1 << 30
"""An undeclared structure reaches an implementation as a dense boolean mask; past this size the case is skipped."""


def checked_structures(value: Any, kind: str, error: Callable[[str], PluginError]) -> tuple[str, ...]:
    """``register``'s ``structures=`` as a tuple of known names, or the error that says what is allowed."""
    if isinstance(value, str):
        value = (value,)
    try:
        items = tuple(value)
    except TypeError:
        raise error(f"structures={value!r} must be a tuple such as ('window', 'bottom_right')") from None
    unknown = [x for x in items if x not in STRUCTURES]
    if unknown:
        raise error(f"structures has unknown value(s) {unknown}; known: "
                    + "; ".join(f"{k}: {v}" for k, v in STRUCTURES.items()))
    if "paged" in items and "cache_seqlens" not in items:
        raise error("structures=('paged',) needs 'cache_seqlens' too: a paged cache's pages may hold more keys than "
                    "the sequence, so a paged call always passes cache_seqlens= (FlashAttention's convention)")
    if items and kind != "kernel":
        raise error("structures= is for kernel implementations (kind='kernel')")
    return tuple(dict.fromkeys(items))


def structure_reasons(native: Iterable[str], mask: bool, case: Any) -> list[str]:
    """Structures the case uses that an implementation neither takes natively nor can get as a mask."""
    folded = sorted(set(getattr(case, "structures", ())) - set(native) - LAYOUT_STRUCTURES)
    if not folded or case.kind != "kernel":
        return []
    declare = f"structures=({', '.join(repr(f) for f in folded)},)"
    if not mask:
        return [f"{' and '.join(folded)} not supported: declare {declare} or mask=True (the harness then "
                f"passes it as a dense mask)"]
    size = case.dense_mask_bytes()
    if size > DENSE_MASK_BUDGET_BYTES:
        return [f"{' and '.join(folded)} as a dense mask would take {size / 2**20:.0f} MiB, over the budget of "
                f"{DENSE_MASK_BUDGET_BYTES / 2**20:.0f} MiB; declare {declare} to take it natively"]
    return []
