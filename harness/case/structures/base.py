"""What a structure is: a small frozen value that knows everything the harness does with it.

A structure restricts or rearranges an attention call beyond the contract's ``causal``, ``mask`` and
``scale`` (a sliding window, bottom-right alignment, packed sequences, ragged cache lengths, a paged
cache). Each is a frozen dataclass (as xformers' ``attn_bias`` classes) that owns:

- its **validation** against the case (:meth:`Structure.problem`: what is wrong and how to fix it);
- its **part of the case id** (:meth:`Structure.id_parts`);
- the **keywords** an implementation declaring it natively receives (:meth:`Structure.native_kwargs`);
- its **folding into a dense boolean mask** for an implementation that does not declare it: the
  keywords it gives the oracle's mask builders (:meth:`Structure.oracle_kwargs`; a new structure
  describes the keys each query row may see with :meth:`Structure.key_range`), with :attr:`context`
  and :attr:`within` saying which other structures fold with it;
- its **FLOPs and bytes**: the (query, key) blocks it cuts the call into (:meth:`Structure.segments`),
  the keys that must be read (:meth:`Structure.key_reads`), whether its pairs grow slower than Tq x Tk
  (:attr:`sparse`), and the leading dimensions of its dense mask (:meth:`Structure.mask_lead`);
- its **reasons** an implementation cannot run it (:meth:`Structure.reasons`).

The harness iterates over a case's structures (:func:`harness.case.structures.parts_of`) and never asks
which one it holds, so a new structure is one new module: a subclass registered with
:func:`harness.case.structures.register_structure`, carried by cases in ``extra_structures``.

This module holds no torch: the key ranges are written with arithmetic that works on torch tensors,
NumPy arrays and integers alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, ClassVar, Protocol, TypedDict

PREDICATE_FRAMES = frozenset({"bottom_right", "varlen"})
"""The structures a query/key predicate (causal masking, a window) is evaluated inside: folding either into
a mask takes the predicate with it (its coordinates move with them)."""



class StructureKeywords(TypedDict, total=False):
    """The structures' keywords of :func:`harness.reference.oracle.reference_attention` and the mask builders
    (:meth:`Structure.oracle_kwargs`): each structure gives its own, merged for a case."""

    window: tuple[int, int] | None
    causal_align: str
    varlen: tuple[tuple[int, int], ...] | None
    cache_seqlens: tuple[int, ...] | None
    key_ranges: Sequence[Any]

class CallArrays(Protocol):
    """What a structure's native keywords are built from: one trial's inputs (:class:`harness.reference.tensors.Inputs`)."""

    k_pages: Any
    block_table: Any
    k_scale_pages: Any
    v_scale_pages: Any

    def index_array(self, values: Sequence[int] | None, case: Any) -> Any:
        """Integers as the implementation's kind of index array (int32 tensor, int64 array); None stays None."""
        ...


@dataclass(frozen=True)
class Structure:
    """Base of every structure; a subclass sets the class attributes and overrides what applies to it.

    The defaults suit a new mask structure held in ``extra_structures``: its fields are its parameters
    (passed by the same names to an implementation that declares it), its id part is ``name=fields``, and it
    describes its mask with :meth:`key_range`."""

    name: ClassVar[str]
    """What ``register(structures=...)`` calls it, and its name in ``case.structures``."""
    description: ClassVar[str]
    """What an implementation declaring it is passed (shown when a declaration names an unknown structure)."""
    parameters: ClassVar[tuple[str, ...]] = ()
    """The keywords a declaring implementation must accept, each with its default (``window=None``)."""
    defaults: ClassVar[tuple[str, ...]] = ()
    """How each of :attr:`parameters` is spelled with its default, for the signature check's hint."""
    requires: ClassVar[tuple[str, ...]] = ()
    """Other structures an implementation declaring this one must declare too."""
    requires_reason: ClassVar[str] = ""
    """Why it requires them (said when a declaration lacks them)."""
    field: ClassVar[str | None] = None
    """The case field that holds it (built-ins, for compact result files); None: it rides in
    ``AttentionCase.extra_structures``."""
    layout: ClassVar[bool] = False
    """A memory layout, not a mask: an implementation that does not declare it gets the same values laid out
    plainly, never a mask, so it is never folded."""
    context: ClassVar[bool] = False
    """It places the others (sequence boundaries, an alignment): any dense mask built for the case includes it."""
    within: ClassVar[frozenset[str]] = PREDICATE_FRAMES
    """Folding any of these into a mask folds this one too (the frames its coordinates depend on)."""
    sparse: ClassVar[bool] = True
    """Its attended pairs grow slower than Tq x Tk: the scaling fit counts pairs, not Tq x Tk."""

    @classmethod
    def of(cls, case: Any) -> Structure | None:
        """This structure as ``case`` holds it, or None when the case does not use it."""
        if cls.field is not None:
            value = getattr(case, cls.field)
            return None if value is None else cls(value)  # type: ignore[call-arg]
        return next((s for s in getattr(case, "extra_structures", ()) if isinstance(s, cls)), None)

    def problem(self, case: Any) -> str | None:
        """Why this structure is invalid in ``case`` (what is wrong and how to fix it), or None."""
        return None

    def id_parts(self) -> tuple[str, ...]:
        """Its parts of the case id: ``name=field1,field2`` by default."""
        return (f"{self.name}=" + ",".join(str(v) for v in asdict(self).values()),)

    @classmethod
    def native_kwargs(cls, case: Any, arrays: CallArrays, folded: bool) -> dict[str, object]:
        """The keywords an implementation declaring this structure receives for ``case`` (whether or not the case
        uses it); ``folded``: the case's instance reaches it inside ``mask=`` instead (a frame it lies in was
        folded), so the keywords must say "none"."""
        own = cls.of(case)
        return {name: None if own is None or folded else getattr(own, name) for name in cls.parameters}

    @classmethod
    def native_arrays(cls, inputs: Any) -> tuple[Any, Any, Any] | None:
        """(q, k, v) as an implementation declaring this structure receives them, or None for the plain arrays
        (a layout structure's own layout, when the trial has one)."""
        return None

    def oracle_kwargs(self) -> StructureKeywords:
        """Its keywords of :func:`harness.reference.oracle.reference_attention` and the mask builders: by default, itself
        as one of ``key_ranges`` (see :meth:`key_range`)."""
        return {"key_ranges": (self,)}

    def key_range(self, i: Any) -> tuple[Any, Any]:
        """The keys query ``i`` (an index, or an array of them, within its sequence) may attend, as a half-open
        range [lo, hi) of key positions j' aligned to the queries (j' = j - (Tk - Tq) under bottom-right
        alignment, else j). Every range applies together with causal masking, a window and the others."""
        raise NotImplementedError(f"structure {self.name!r} defines no key_range and no oracle_kwargs")

    def segments(self, case: Any) -> Sequence[tuple[int, int]] | None:
        """A frame's (query length, key length) blocks, over the whole batch, that attention runs inside; None
        when this structure does not cut the call (then it is one (Tq, Tk) block per batch element)."""
        return None

    def key_reads(self, case: Any) -> int | None:
        """Keys the call must read summed over the batch (for the compulsory bytes), or None to leave it to the
        default (the keys some query may attend, per batch element)."""
        return None

    def mask_lead(self, case: Any) -> tuple[int, int]:
        """The (batch, heads) leading dimensions of a dense mask of this structure: (1, 1) broadcasts."""
        return (1, 1)

    def draw(self, inputs: Any, case: Any, k: Any, v: Any, generator: Any, backend: str) -> None:
        """Add what this structure needs to one trial's inputs (:class:`harness.reference.tensors.Inputs`, changed in place)
        from its rounded K and V (B, Hkv, Tk, d) and the trial's torch generator, after everything else is drawn;
        ``backend`` is "torch" or "numpy". Most structures need nothing."""

    def reasons(self, capabilities: Any) -> list[str]:
        """Why an implementation with these declared capabilities cannot run this structure (beyond the generic
        "not declared and no mask"); empty when it can."""
        return []

    def to_json(self) -> dict[str, Any]:
        """Plain data for a result file (extra structures only: built-ins are case fields)."""
        return {"structure": self.name, **{k: _jsonable(v) for k, v in asdict(self).items()}}


def _jsonable(value: Any) -> Any:
    return [_jsonable(v) for v in value] if isinstance(value, tuple) else value


def from_json_fields(cls: type[Structure], data: dict[str, Any]) -> Structure:
    """A structure of type ``cls`` from :meth:`Structure.to_json` output (lists back to tuples)."""
    def tuples(value: Any) -> Any:
        return tuple(tuples(v) for v in value) if isinstance(value, list) else value

    return cls(**{k: tuples(v) for k, v in data.items() if k != "structure"})
