"""Structures of an attention call, as types: sliding windows, alignment, packed sequences, KV caches, pages.

Each structure is a small frozen type (:mod:`harness.case.structures.base`) that validates itself, names itself
in the case id, builds the keywords an implementation taking it natively receives, folds into a dense
boolean mask for one that does not (which then needs ``mask=True`` and a mask within
:data:`DENSE_MASK_BUDGET_BYTES`), counts its FLOPs and bytes and states its reasons. The harness iterates
over a case's structures (:func:`parts_of`) and never branches on which one it holds: a new structure is
one new module defining a :class:`Structure` subclass, registered with :func:`register_structure` (so that
``register(structures=...)`` and result files know its name) and carried by cases in
``AttentionCase.extra_structures``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from harness.case.structures.alignment import CAUSAL_ALIGNS, Alignment
from harness.case.structures.base import PREDICATE_FRAMES, CallArrays, Structure, StructureKeywords, from_json_fields
from harness.case.structures.cache import CacheLengths
from harness.case.structures.packed import Packed
from harness.case.structures.paged import Paged
from harness.case.structures.window import Window
from harness.errors import PluginError

__all__ = ["CAUSAL", "CAUSAL_ALIGNS", "DENSE_MASK_BUDGET_BYTES", "BUILT_IN", "CallArrays", "Structure", "checked_structures",
           "dense_kwargs", "folded_names", "native_kwargs", "oracle_kwargs", "parts_of", "register_structure",
           "structure_reasons", "structure_type", "structure_types"]

BUILT_IN: tuple[type[Structure], ...] = (Window, Alignment, Packed, CacheLengths, Paged)
"""The built-in structures, each held in a case field, in the order of their parts of the case id."""
_TYPES: dict[str, type[Structure]] = {t.name: t for t in BUILT_IN}
DENSE_MASK_BUDGET_BYTES = 1 << 30
"""An undeclared structure reaches an implementation as a dense boolean mask; past this size the case is skipped."""
CAUSAL = "causal"
"""The contract's own causal masking, in a set of folded names: folded with the frames it is evaluated in."""

S = TypeVar("S", bound=type[Structure])


def register_structure(cls: S) -> S:
    """Make a structure type known by name (to ``register(structures=...)`` and result files); a decorator."""
    known = _TYPES.get(cls.name)
    if known is not None and known is not cls:
        raise ValueError(f"a structure named {cls.name!r} is already registered ({known.__module__}.{known.__name__})")
    _TYPES[cls.name] = cls
    return cls


def unregister_structure(cls: type[Structure]) -> None:
    """Forget a type :func:`register_structure` added (built-ins stay)."""
    if cls not in BUILT_IN and _TYPES.get(cls.name) is cls:
        del _TYPES[cls.name]


def structure_types() -> tuple[type[Structure], ...]:
    """Every known structure type: the built-ins, then registered ones in the order they were registered."""
    return tuple(_TYPES.values())


def structure_type(name: str) -> type[Structure]:
    """The type called ``name``; a ``KeyError`` naming the known ones."""
    try:
        return _TYPES[name]
    except KeyError:
        raise KeyError(f"unknown structure {name!r}; known: {sorted(_TYPES)}") from None


def structure_from_json(data: Any) -> Structure:
    """An extra structure from its result-file form (:meth:`Structure.to_json`); an instance passes through."""
    if isinstance(data, Structure):
        return data
    return from_json_fields(structure_type(data["structure"]), data)


def parts_of(case: Any) -> tuple[Structure, ...]:
    """The structures ``case`` uses: built-ins from their fields (in id order), then its ``extra_structures``."""
    built_in = (t.of(case) for t in BUILT_IN)
    extra = (s for s in getattr(case, "extra_structures", ()) if isinstance(s, Structure))  # others: invalid
    return tuple(s for s in built_in if s is not None) + tuple(extra)


def checked_structures(value: Any, kind: str, error: Callable[[str], PluginError]) -> tuple[str, ...]:
    """``register``'s ``structures=`` as a tuple of known names, or the error that says what is allowed."""
    if isinstance(value, str):
        value = (value,)
    try:
        items = tuple(value)
    except TypeError:
        raise error(f"structures={value!r} must be a tuple such as ('window', 'bottom_right')") from None
    unknown = [x for x in items if x not in _TYPES]
    if unknown:
        raise error(f"structures has unknown value(s) {unknown}; known: "
                    + "; ".join(f"{t.name}: {t.description}" for t in _TYPES.values()))
    for name in items:
        missing = [r for r in _TYPES[name].requires if r not in items]
        if missing:
            raise error(f"structures=({name!r},) needs {', '.join(map(repr, missing))} too: {_TYPES[name].requires_reason}")
    if items and kind != "kernel":
        raise error("structures= is for kernel implementations (kind='kernel')")
    return tuple(dict.fromkeys(items))


def parameters_of(name: str) -> tuple[tuple[str, str], ...]:
    """(keyword, its spelling with the default) for each keyword an implementation declaring ``name`` takes."""
    t = _TYPES[name]
    return tuple(zip(t.parameters, t.defaults or tuple(f"{p}=None" for p in t.parameters)))


def folded_names(parts: Iterable[Structure], native: Iterable[str], causal: bool) -> frozenset[str]:
    """The structures of a case (and ``"causal"``) an implementation taking ``native`` receives folded into its
    mask: those it does not declare, and every one evaluated inside a folded frame (:attr:`Structure.within`)."""
    masks = [p for p in parts if not p.layout]
    taken = frozenset(native)
    folded = {p.name for p in masks if p.name not in taken}
    grown = True
    while grown:
        more = {p.name for p in masks if p.within & folded} - folded
        folded |= more
        grown = bool(more)
    if causal and PREDICATE_FRAMES & folded:
        folded.add(CAUSAL)
    return frozenset(folded)


def oracle_kwargs(parts: Iterable[Structure]) -> StructureKeywords:
    """The structures' keywords of :func:`harness.reference.oracle.reference_attention` and the mask builders, merged
    (``key_ranges`` gathered from every structure that gives them)."""
    merged: StructureKeywords = {}
    for part in parts:
        own = part.oracle_kwargs()
        ranges = (*merged.get("key_ranges", ()), *own.get("key_ranges", ()))
        merged.update(own)
        if "key_ranges" in merged or "key_ranges" in own:
            merged["key_ranges"] = ranges
    return merged


def dense_kwargs(parts: Iterable[Structure], folded: frozenset[str]) -> StructureKeywords | None:
    """The mask builders' keywords of the dense mask a case's ``folded`` structures become (the structures that
    place them included), or None when nothing is folded."""
    if not folded:
        return None
    return oracle_kwargs(p for p in parts if p.context or p.name in folded)


def native_kwargs(case: Any, arrays: CallArrays, native: Iterable[str], folded: frozenset[str]) -> dict[str, object]:
    """The keywords of every structure an implementation declares (``native``), in registration order: passed
    through to the implementation as they are."""
    taken = frozenset(native)
    kwargs: dict[str, object] = {}
    for t in structure_types():
        if t.name in taken:
            kwargs.update(t.native_kwargs(case, arrays, t.name in folded))
    return kwargs


def structure_reasons(implementation: Any, case: Any) -> list[str]:
    """Why ``implementation`` cannot run the structures of ``case``: each structure's own reasons against its
    capabilities, and those it neither takes natively nor can get as a mask (``mask=True``, within the budget)."""
    parts = getattr(case, "structure_parts", ())
    reasons = [reason for part in parts for reason in part.reasons(implementation)]
    folded = sorted({p.name for p in parts if not p.layout} - set(implementation.structures))
    if not folded or case.kind != "kernel":
        return reasons
    declare = f"structures=({', '.join(repr(f) for f in folded)},)"
    if not implementation.mask:
        return reasons + [f"{' and '.join(folded)} not supported: declare {declare} or mask=True (the harness then "
                          f"passes it as a dense mask)"]
    size = case.dense_mask_bytes()
    if size > DENSE_MASK_BUDGET_BYTES:
        reasons.append(f"{' and '.join(folded)} as a dense mask would take {size / 2**20:.0f} MiB, over the budget of "
                       f"{DENSE_MASK_BUDGET_BYTES / 2**20:.0f} MiB; declare {declare} to take it natively")
    return reasons
