"""Cases: one frozen, hashable description of an attention call, with a readable id.

The id is the pytest id and the report label, so it is short, stable and says what
differs from the defaults (``B3-H8/2-T113x203-d59-float32-causal-mask=random``).
Suites of cases are generated from an implementation's declared capabilities
elsewhere (:mod:`harness.verify.suites`); this module only defines what a case is.

It is one module because it is one record: the vocabulary its fields draw on, each field
with the docstring that says what it means, the rules a case obeys and its id read those fields together, and
a reader checking one rule needs the field's meaning beside it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import Field, dataclass, field, replace
from functools import cached_property
from typing import Any, ClassVar, TypedDict, TypeVar

from harness.case.devices import DEVICES
from harness.case.dtypes import DTYPES
from harness.case.quantized import id_part, kv_cache_problems
from harness.case.structures import Structure, oracle_kwargs, parts_of, structure_from_json
from harness.case.structures.base import StructureKeywords
from harness.errors import UsageError

MASKS = ("none", "random", "key_padding", "empty_rows", "key_padding_left", "key_padding_holes", "one_masked",
         "key_padding_late", "first_block")
"""none; random booleans; key padding (a suffix of keys masked per batch); random with some rows all False;
left padding (a prefix masked); padding with holes (scattered keys masked, the same for every query);
exactly one key masked in every query row; key padding where batch element 0 is padded most and the last
not at all (a kernel reading one element's padding for all shows on every other); a whole first block of
keys masked for some rows (at least 512 of them once Tk > 520: the block an online softmax meets first)."""
MASK_RANKS = ("full", "2d", "3d", "bcast_heads")
"""The mask's shape: full (B, H, Tq, Tk) (key padding: (B, 1, 1, Tk)); 2d (Tq, Tk), one for every batch
element and head; 3d (H, Tq, Tk), broadcast over the batch; bcast_heads (B, 1, Tq, Tk)."""
INPUTS = ("randn", "large", "rand", "wide", "huge", "tiny")
"""randn; randn scaled into large logits (q x5, k x3); rand (non-negative); wide: V scaled to the square root
of the dtype's largest finite value (bf16/fp32 ~1.8e19, fp16 256, fp64 ~1.3e154), far past any narrower
type's range, so a kernel that computes in a narrower type inside (bf16 through fp16, fp64 through fp32)
overflows, while products of two such values stay finite. Q and K stay randn: the logits are ordinary.
huge: every logit of a row offset by the same constant at the edge of the dtype's range, positive in some rows
and negative in others (scaled logits near +-1e5 in float32/float64/bfloat16; in float16 a raw |q.k| of 7e4,
past 65,504 before the scale): softmax is unchanged by the offset, a kernel that overflows, or starts its
running max at a finite sentinel, is not (:func:`harness.reference.tensors.huge_logits`). tiny: q and k scaled by 2^-5,
logits near 1e-3 (nearly uniform weights)."""
TENSORS = ("q", "k", "v", "dout", "mask", "bias", "index", "scale")
"""The arrays a case may lay out one by one (``AttentionCase.layouts``): q, k, v, the backward's upstream
gradient, the mask, the bias, the index arrays (cache lengths, block table, cumulative lengths) and an FP8
cache's scales."""
LAYOUTS = ("contiguous", "transposed", "strided", "offset")
"""contiguous (B,H,T,d); a (B,T,H,d) buffer viewed transposed; every other column of a (B,H,T,2d) buffer;
a contiguous view that starts inside its buffer (nonzero storage offset, as a packed QKV split by unbind)."""
BIASES = ("none", "alibi")
_VOCABULARY: tuple[tuple[str, tuple[Any, ...]], ...] = (
    ("dtype", DTYPES), ("device", DEVICES), ("mask", MASKS), ("mask_rank", MASK_RANKS), ("inputs", INPUTS),
    ("layout", LAYOUTS), ("aux_layout", LAYOUTS), ("bias", BIASES),
)
"""Fields that take one of a fixed set of values (``causal_align`` is the alignment structure's own)."""
_MASK_LEAD: dict[str, Callable[[int, int], tuple[int, int]]] = {
    "full": lambda b, h: (b, h), "2d": lambda b, h: (1, 1), "3d": lambda b, h: (1, h), "bcast_heads": lambda b, h: (b, 1),
}
"""The (batch, heads) leading dimensions of a mask of each rank."""
_TUPLE_FIELDS: dict[str, Callable[[list[Any]], Any]] = {
    "window": tuple, "cache_seqlens": tuple, "varlen": lambda pairs: tuple(tuple(pair) for pair in pairs),
    "layouts": lambda pairs: tuple(tuple(pair) for pair in pairs),
    "kv_scale_values": lambda pairs: tuple(tuple(s) if isinstance(s, list) else s for s in pairs),
    "extra_structures": lambda items: tuple(structure_from_json(item) for item in items),
}
"""Fields a result file gives back as lists, and how to make them tuples again."""


CaseT = TypeVar("CaseT", bound="CaseRecord")


def _plain(value: Any) -> Any:
    """Structures (in ``extra_structures``) as their JSON form; anything else unchanged."""
    if isinstance(value, tuple) and value and isinstance(value[0], Structure):
        return [s.to_json() for s in value]
    return value


class CaseRecord:
    """What every kind of case shares: copies with changes, and a round trip through result files."""

    __dataclass_fields__: ClassVar[dict[str, Field[Any]]]

    def with_(self: CaseT, **changes: Any) -> CaseT:
        """A copy with some fields changed (validated again)."""
        return replace(self, **changes)  # type: ignore[type-var]

    def to_dict(self) -> dict[str, Any]:
        """Every field (one marked ``omit_empty`` only when it holds something), as plain data."""
        return {name: _plain(getattr(self, name)) for name, f in self.__dataclass_fields__.items()
                if getattr(self, name) or not f.metadata.get("omit_empty")}

    @classmethod
    def from_dict(cls: type[CaseT], data: dict[str, Any]) -> CaseT:
        """Rebuild a case from ``to_dict`` output; keys it does not know (newer files) are ignored."""
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})



class CaseFields(TypedDict, total=False):
    """Some of an :class:`AttentionCase`'s fields by name, as suites, sweeps and the fuzzer compose them
    before the case is built (``AttentionCase(**fields)``)."""

    batch: int
    heads: int
    tq: int
    d: int
    kv_heads: int
    tk: int
    dtype: str
    device: str
    causal: bool
    mask: str
    mask_rank: str
    scale: float | None
    inputs: str
    layout: str
    self_attention: bool
    grad: bool
    bias: str
    kind: str
    pairwise: bool
    window: tuple[int, int] | None
    varlen: tuple[tuple[int, int], ...] | None
    causal_align: str
    cache_seqlens: tuple[int, ...] | None
    page_size: int | None
    aux_layout: str
    kv_dtype: str | None
    kv_scales: str | None
    kv_scale_values: tuple[tuple[float, ...], tuple[float, ...]] | None
    growth: bool
    sinks: bool
    softcap: float | None
    dv: int
    layouts: tuple[tuple[str, str], ...]

@dataclass(frozen=True)
class AttentionCase(CaseRecord):
    """One attention call: shapes, dtype, device, masking and how the inputs are drawn."""

    batch: int = 1
    heads: int = 1
    tq: int = 16
    d: int = 16
    kv_heads: int = 0
    """0 means equal to ``heads``."""
    tk: int = 0
    """0 means equal to ``tq``."""
    dtype: str = "float32"
    device: str = "cpu"
    causal: bool = False
    mask: str = "none"
    mask_rank: str = "full"
    scale: float | None = None
    inputs: str = "randn"
    layout: str = "contiguous"
    self_attention: bool = False
    grad: bool = False
    bias: str = "none"
    kind: str = "kernel"
    pairwise: bool = False
    """A row of the covering array (:mod:`harness.verify.pairwise`): checked with one trial and the stateful
    property only, since its worth is the combination it holds, not repeated draws. Not part of the id."""
    window: tuple[int, int] | None = None
    """A sliding window (left, right): query i attends keys j with i - left <= j' <= i + right, where
    j' = j - (Tk - Tq) under bottom-right alignment (FlashAttention's convention). With causal, right is 0
    in effect. Part of the id (``window=L,R``) only when set."""
    varlen: tuple[tuple[int, int], ...] | None = None
    """Packed variable-length sequences: per sequence (query length, key length), packed along T in a
    batch of 1 (tq and tk are their sums). Block-diagonal: a query attends only its own sequence's keys,
    with causality and the window applied inside each sequence. Part of the id (``varlen=5,3x9,...``)
    only when set."""
    causal_align: str = "top_left"
    """Alignment of causal masking and of the window when Tq != Tk (:data:`harness.case.structures.CAUSAL_ALIGNS`). Part of the id
    (``bottom_right``) only when not the default."""
    cache_seqlens: tuple[int, ...] | None = None
    """KV-cache decode (FlashAttention's ``cache_seqlens``): per batch element, how many of the Tk cached
    keys are valid (keys j < L_b); causality and the window apply to (Tq, L_b) of each element, so with
    bottom-right alignment the Tq new queries are the last positions of each sequence. Part of the id
    (``cache=...``) only when set. See :mod:`harness.case.decode`."""
    page_size: int | None = None
    """A paged KV cache (vLLM, FlashAttention's ``block_table``): K and V live in shuffled pages of this many
    keys; an implementation that declares ``structures=('paged',)`` receives the page pools and the block
    table, any other the same keys contiguous. Part of the id (``paged=16``) only when set."""
    aux_layout: str = "contiguous"
    """The layout (:data:`LAYOUTS`, :mod:`harness.case.layouts`) of every array passed besides q, k and v: the mask,
    the bias, the backward's upstream gradient, cache lengths, block tables, cumulative sequence lengths.
    Part of the id (``aux=strided``) only when not contiguous."""
    kv_dtype: str | None = field(default=None, metadata={"omit_empty": True})
    """A KV cache stored in another dtype than q's (inference keeps bf16/fp16 caches beside fp32 queries):
    K and V are drawn, rounded and passed in this dtype, q (and the output) in ``dtype``. Forward-only. The
    rule's baseline computes with K and V converted to ``dtype``; the oracle reads the stored values (see
    docs/decode.md). Part of the id (``kv=bfloat16``, right after the dtype) and of result files only when
    set; never equal to ``dtype`` (leave it unset), so each case has one id. An FP8 type
    (:data:`harness.case.dtypes.FP8_DTYPES`) stores the cache with float32 scales: ``kv_scales`` says how."""
    kv_scales: str | None = field(default=None, metadata={"omit_empty": True})
    """An FP8 cache's scale layout (:data:`harness.case.quantized.SCALE_LAYOUTS`: ``tensor``, ``head``, ``token``),
    required with an FP8 ``kv_dtype`` and only with one: K and V arrive in FP8 with ``k_scale=``, ``v_scale=``,
    and the oracle and the rule's baseline read the dequantized values (:mod:`harness.case.quantized`). Part of
    the id (``kv=float8_e4m3fn/head``) and of result files only when set."""
    kv_scale_values: tuple[tuple[float, ...], tuple[float, ...]] | None = field(
        default=None, metadata={"omit_empty": True})
    """Static FP8 scales, as a checkpoint's calibration gives them: (K's, V's), one each for ``tensor`` scales, one
    per kv head for ``head`` scales; None: computed from the cache as it is written. A value past the FP8 range
    saturates. Part of the id (``kv=float8_e4m3fn/tensor=0.02,0.05``, a digest when there are more) when set."""
    growth: bool = False
    """A point of the error-growth sweep (:mod:`harness.verify.growth`): its one check, ``error_growth``,
    records the error against the oracle at this T beside the same-dtype baseline's. Not part of the id."""

    sinks: bool = field(default=False, metadata={"omit_empty": True})
    """Learned per-head attention sinks (gpt-oss): a logit s_h per query head joins each row's softmax
    denominator and contributes no value, ``out = sum_j exp(x_j) v_j / (exp(s_h) + sum_j exp(x_j))``; drawn
    randn, passed as ``sinks=`` (H,) in q's dtype, differentiable. Part of the id (``sinks``) only when set."""
    softcap: float | None = field(default=None, metadata={"omit_empty": True})
    """Logit soft-capping (Gemma 2, FlashAttention's ``softcap``): the scaled logits become
    ``softcap * tanh(logits / softcap)`` before masking. Part of the id (``softcap=30``) only when set."""
    dv: int = field(default=0, metadata={"omit_empty": True})
    """V's head dim when it differs from q's and k's (DeepSeek MLA: d 192, dv 128); 0: equal to ``d``. The
    output has V's head dim; the default scale stays 1/sqrt(d). Part of the id (``dv128``) only when set."""
    layouts: tuple[tuple[str, str], ...] = field(default=(), metadata={"omit_empty": True})
    """Layouts of single arrays, (name, layout) with names from :data:`TENSORS`, overriding ``layout`` (q, k, v) or
    ``aux_layout`` (the others) for that array alone: K and V in different layouts catch a kernel that reads V
    with K's strides. Part of the id (``lay=v:transposed``) and of result files only when set."""

    extra_structures: tuple[Structure, ...] = field(default=(), metadata={"omit_empty": True})
    """Structures beyond the built-in fields (:mod:`harness.case.structures`): a new structure is a type, carried here.
    Their parts of the id follow the built-ins'; in result files only when there are any."""

    def __post_init__(self) -> None:
        if self.kv_heads == 0:
            object.__setattr__(self, "kv_heads", self.heads)
        if self.tk == 0:
            object.__setattr__(self, "tk", self.tq)
        if self.dv == self.d:
            object.__setattr__(self, "dv", 0)  # one case, one id
        for name, tuples in _TUPLE_FIELDS.items():  # read back from a result file (JSON has no tuples)
            if isinstance(getattr(self, name), list):
                object.__setattr__(self, name, tuples(getattr(self, name)))
        self.validate()

    def validate(self) -> None:
        """Raise a :class:`UsageError` naming the first rule this case breaks (:meth:`problems`)."""
        problem = next(self.problems(), None)
        if problem is not None:
            raise UsageError(f"invalid case {self.id}: {problem}")

    def problems(self) -> Iterator[str]:
        """Each rule this case breaks, lazily and in a fixed order (a later rule may assume an earlier one holds:
        ``heads % kv_heads`` needs integer heads)."""
        yield from self._shape_problems()
        yield from self._value_problems()
        yield from self._array_problems()
        for part in self.structure_parts:
            problem = part.problem(self)
            if problem is not None:
                yield problem

    def _shape_problems(self) -> Iterator[str]:
        """Sizes, the vocabulary fields, and the shapes self-attention needs."""
        for name in ("batch", "heads", "tq", "d", "kv_heads", "tk"):
            if not (isinstance(getattr(self, name), int) and getattr(self, name) >= 1):
                yield f"{name} must be an integer >= 1"
        if self.heads % self.kv_heads != 0:
            yield f"heads={self.heads} must be a multiple of kv_heads={self.kv_heads}"
        for name, allowed in _VOCABULARY:
            if getattr(self, name) not in allowed:
                yield f"{name} {getattr(self, name)!r} is not one of {allowed}"
        if self.mask_rank != "full" and self.mask == "none":
            yield "a mask rank needs a mask"
        if self.self_attention and not (self.tq == self.tk and self.kv_heads == self.heads):
            yield "self-attention needs tq == tk and kv_heads == heads"

    def _value_problems(self) -> Iterator[str]:
        """dv, softcap, scale and the KV cache's dtype, alone and with what they cannot be combined with."""
        if not (isinstance(self.dv, int) and self.dv >= 0):
            yield "dv must be an integer >= 1 (or 0: equal to d)"
        if not _positive_finite_or_none(self.softcap):
            yield "softcap must be a finite number > 0 (or None)"
        if self.softcap is not None and self.bias != "none":
            yield "softcap with a bias: where the bias joins relative to the cap differs between kernels; pick one"
        if self.self_attention and (self.dv or self.sinks):
            yield "self-attention has q = k = v: no dv, no sinks"
        if not (self.scale is None or (math.isfinite(self.scale) and self.scale >= 0)):
            yield "scale must be a finite number >= 0"
        yield from kv_cache_problems(self)

    def _array_problems(self) -> Iterator[str]:
        """How the arrays are laid out and drawn, and the structure types carried beyond the built-ins."""
        if not _distinct_layout_pairs(self.layouts):
            yield (f"layouts {self.layouts!r} must be distinct (tensor, layout) pairs: tensors {TENSORS}, "
                   f"layouts {LAYOUTS}")
        if self.self_attention and any(p[0] in ("q", "k", "v") for p in self.layouts):
            yield "self-attention passes q, k and v as one tensor: it has one layout"
        if self.inputs == "huge" and self.self_attention:
            yield "huge logits need q and k drawn apart (no self)"
        if not all(isinstance(s, Structure) for s in self.extra_structures):
            yield f"extra_structures {self.extra_structures!r} must hold harness.case.structures.Structure instances"

    @cached_property
    def structure_parts(self) -> tuple[Structure, ...]:
        """The structures this case uses, as values (:func:`harness.case.structures.parts_of`): built-ins in id order,
        then ``extra_structures``."""
        return parts_of(self)

    @property
    def id(self) -> str:
        heads = f"H{self.heads}" if self.kv_heads == self.heads else f"H{self.heads}/{self.kv_heads}"
        seq = f"T{self.tq}" if self.tq == self.tk else f"T{self.tq}x{self.tk}"
        parts = [f"B{self.batch}", heads, seq, f"d{self.d}" + (f"dv{self.dv}" if self.dv else ""), self.dtype]
        parts += [label(self) for name, default, label in _ID_OPTIONS if getattr(self, name) != default]
        parts += [text for part in self.structure_parts for text in part.id_parts()]
        parts += [label(self) for name, default, label in _ID_TAIL if getattr(self, name) != default]
        return "-".join([self.kind, *parts] if self.kind != "kernel" else parts)

    @property
    def structures(self) -> frozenset[str]:
        """The names of the structures this case uses ("window", "bottom_right", "varlen", ...): what an
        implementation must take natively (``register(structures=...)``) or receive as a dense mask instead."""
        return frozenset(part.name for part in self.structure_parts)

    def structure_kwargs(self) -> StructureKeywords:
        """The structures as keywords of :func:`harness.reference.oracle.reference_attention` and its mask builders
        (``window``, ``causal_align``, ``varlen``, ``cache_seqlens``, ``key_ranges`` when used)."""
        return oracle_kwargs(self.structure_parts)

    def dense_mask_bytes(self) -> int:
        """Bytes of the boolean mask the harness builds when it folds this case's structure into ``mask=``:
        (Tq, Tk) broadcast against the case's own mask and the structures' leading dimensions."""
        b, h = self.batch, self.heads
        mask_b, mask_h = _MASK_LEAD[self.mask_rank](b, h) if self.mask != "none" else (1, 1)
        if self.mask == "key_padding" and self.mask_rank == "full":
            mask_h = 1  # (B, 1, 1, Tk)
        for part in self.structure_parts:
            part_b, part_h = part.mask_lead(self)
            mask_b, mask_h = max(mask_b, part_b), max(mask_h, part_h)
        return mask_b * mask_h * self.tq * self.tk

    def layout_of(self, tensor: str) -> str:
        """The layout of one array (:data:`TENSORS`): its own from ``layouts``, else ``layout`` for q, k and v and
        ``aux_layout`` for the others."""
        own = dict(self.layouts).get(tensor)
        return own or (self.layout if tensor in ("q", "k", "v") else self.aux_layout)

    @property
    def value_dim(self) -> int:
        """V's (and the output's) head dim."""
        return self.dv or self.d

    @property
    def effective_scale(self) -> float:
        return self.scale if self.scale is not None else 1.0 / float(self.d) ** 0.5



def _positive_finite_or_none(value: object) -> bool:
    """A soft-cap's value: None, or a finite number > 0."""
    return value is None or (isinstance(value, (int, float)) and math.isfinite(value) and value > 0)


def _distinct_layout_pairs(layouts: tuple[tuple[str, str], ...]) -> bool:
    """``layouts`` as a case holds it: (tensor, layout) pairs of known names, one per tensor."""
    return all(isinstance(p, tuple) and len(p) == 2 and p[0] in TENSORS and p[1] in LAYOUTS for p in layouts) \
        and len({p[0] for p in layouts}) == len(layouts)


_ID_OPTIONS: tuple[tuple[str, Any, Callable[[AttentionCase], str]], ...] = (
    ("kv_dtype", None, id_part),
    ("device", "cpu", lambda c: c.device),
    ("causal", False, lambda c: "causal"),
)
"""Parts of the id between the dtype and the structures: (field, default, label when it differs)."""
_ID_TAIL: tuple[tuple[str, Any, Callable[[AttentionCase], str]], ...] = (
    ("mask", "none", lambda c: f"mask={c.mask}" + ("" if c.mask_rank == "full" else f"/{c.mask_rank}")),
    ("bias", "none", lambda c: f"bias={c.bias}"),
    ("sinks", False, lambda c: "sinks"),
    ("softcap", None, lambda c: f"softcap={c.softcap:g}"),
    ("scale", None, lambda c: f"scale={c.scale:g}"),
    ("inputs", "randn", lambda c: f"in={c.inputs}"),
    ("layout", "contiguous", lambda c: c.layout),
    ("aux_layout", "contiguous", lambda c: f"aux={c.aux_layout}"),
    ("layouts", (), lambda c: "lay=" + ",".join(f"{n}:{lay}" for n, lay in c.layouts)),
    ("self_attention", False, lambda c: "self"),
    ("grad", False, lambda c: "grad"),
)
"""Parts of the id after the structures, in order."""
