"""Cases: one frozen, hashable description of an attention call, with a readable id.

The id is the pytest id and the report label, so it is short, stable and says what
differs from the defaults (``B3-H8/2-T113x203-d59-float32-causal-mask=random``).
Suites of cases are generated from an implementation's declared capabilities
elsewhere (:mod:`harness.verify.suites`); this module only defines what a case is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, ClassVar, TypeVar

from harness.errors import UsageError
from harness.registry import DEVICES, DTYPES

MASKS = ("none", "random", "key_padding", "empty_rows", "key_padding_left", "key_padding_holes", "one_masked")
"""none; random booleans; key padding (a suffix of keys masked per batch); random with some rows all False;
left padding (a prefix masked); padding with holes (scattered keys masked, the same for every query);
exactly one key masked in every query row."""
MASK_RANKS = ("full", "2d", "3d", "bcast_heads")
"""The mask's shape: full (B, H, Tq, Tk) (key padding: (B, 1, 1, Tk)); 2d (Tq, Tk), one for every batch
element and head; 3d (H, Tq, Tk), broadcast over the batch; bcast_heads (B, 1, Tq, Tk)."""
INPUTS = ("randn", "large", "rand", "wide")
"""randn; randn scaled into large logits (q x5, k x3); rand (non-negative); wide: V scaled to the square root
of the dtype's largest finite value (bf16/fp32 ~1.8e19, fp16 256, fp64 ~1.3e154), far past any narrower
type's range, so a kernel that computes in a narrower type inside (bf16 through fp16, fp64 through fp32)
overflows, while products of two such values stay finite. Q and K stay randn: the logits are ordinary."""
LAYOUTS = ("contiguous", "transposed", "strided", "offset")
"""contiguous (B,H,T,d); a (B,T,H,d) buffer viewed transposed; every other column of a (B,H,T,2d) buffer;
a contiguous view that starts inside its buffer (nonzero storage offset, as a packed QKV split by unbind)."""
BIASES = ("none", "alibi")
CAUSAL_ALIGNS = ("top_left", "bottom_right")
"""Where the diagonal of causal masking (and the centre of a window) sits when Tq != Tk: top-left (SDPA's
``is_causal``: query i sees keys j <= i) or bottom-right (FlashAttention, chunked prefill: j <= i + Tk - Tq)."""


CaseT = TypeVar("CaseT", bound="CaseRecord")


class CaseRecord:
    """What every kind of case shares: copies with changes, and a round trip through result files."""

    __dataclass_fields__: ClassVar[dict[str, Any]]

    def with_(self: CaseT, **changes: Any) -> CaseT:
        """A copy with some fields changed (validated again)."""
        return replace(self, **changes)  # type: ignore[type-var]

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}

    @classmethod
    def from_dict(cls: type[CaseT], data: dict[str, Any]) -> CaseT:
        """Rebuild a case from ``to_dict`` output; keys it does not know (newer files) are ignored."""
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


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
    """Alignment of causal masking and of the window when Tq != Tk (:data:`CAUSAL_ALIGNS`). Part of the id
    (``bottom_right``) only when not the default."""
    cache_seqlens: tuple[int, ...] | None = None
    """KV-cache decode (FlashAttention's ``cache_seqlens``): per batch element, how many of the Tk cached
    keys are valid (keys j < L_b); causality and the window apply to (Tq, L_b) of each element, so with
    bottom-right alignment the Tq new queries are the last positions of each sequence. Part of the id
    (``cache=...``) only when set. See :mod:`harness.decode`."""
    page_size: int | None = None
    """A paged KV cache (vLLM, FlashAttention's ``block_table``): K and V live in shuffled pages of this many
    keys; an implementation that declares ``structures=('paged',)`` receives the page pools and the block
    table, any other the same keys contiguous. Part of the id (``paged=16``) only when set."""
    aux_layout: str = "contiguous"
    """The layout (:data:`LAYOUTS`, :mod:`harness.layouts`) of every array passed besides q, k and v: the mask,
    the bias, the backward's upstream gradient, cache lengths, block tables, cumulative sequence lengths.
    Part of the id (``aux=strided``) only when not contiguous."""
    kv_dtype: str | None = None
    """A KV cache stored in another dtype than q's (inference keeps bf16/fp16 caches beside fp32 queries):
    K and V are drawn, rounded and passed in this dtype, q (and the output) in ``dtype``. Forward-only. The
    rule's baseline computes with K and V converted to ``dtype``; the oracle reads the stored values (see
    docs/decode.md). Part of the id (``kv=bfloat16``, right after the dtype) only when set; never equal to
    ``dtype`` (leave it unset), so each case has one id."""
    growth: bool = False
    """A point of the error-growth sweep (:mod:`harness.verify.growth`): its one check, ``error_growth``,
    records the error against the oracle at this T beside the same-dtype baseline's. Not part of the id."""

    def __post_init__(self) -> None:
        if self.kv_heads == 0:
            object.__setattr__(self, "kv_heads", self.heads)
        if self.tk == 0:
            object.__setattr__(self, "tk", self.tq)
        if isinstance(self.window, list):  # read back from a result file (JSON has no tuples)
            object.__setattr__(self, "window", tuple(self.window))
        if isinstance(self.varlen, list):
            object.__setattr__(self, "varlen", tuple(tuple(pair) for pair in self.varlen))
        if isinstance(self.cache_seqlens, list):
            object.__setattr__(self, "cache_seqlens", tuple(self.cache_seqlens))
        self.validate()

    def validate(self) -> None:
        def need(ok: bool, message: str) -> None:
            if not ok:
                raise UsageError(f"invalid case {self.id}: {message}")

        for name in ("batch", "heads", "tq", "d", "kv_heads", "tk"):
            need(isinstance(getattr(self, name), int) and getattr(self, name) >= 1, f"{name} must be an integer >= 1")
        need(self.heads % self.kv_heads == 0, f"heads={self.heads} must be a multiple of kv_heads={self.kv_heads}")
        need(self.dtype in DTYPES, f"dtype {self.dtype!r} is not one of {DTYPES}")
        need(self.device in DEVICES, f"device {self.device!r} is not one of {DEVICES}")
        need(self.mask in MASKS, f"mask {self.mask!r} is not one of {MASKS}")
        need(self.mask_rank in MASK_RANKS, f"mask_rank {self.mask_rank!r} is not one of {MASK_RANKS}")
        need(self.mask_rank == "full" or self.mask != "none", "a mask rank needs a mask")
        need(self.inputs in INPUTS, f"inputs {self.inputs!r} is not one of {INPUTS}")
        need(self.layout in LAYOUTS, f"layout {self.layout!r} is not one of {LAYOUTS}")
        need(self.aux_layout in LAYOUTS, f"aux_layout {self.aux_layout!r} is not one of {LAYOUTS}")
        need(self.bias in BIASES, f"bias {self.bias!r} is not one of {BIASES}")
        need(not self.self_attention or (self.tq == self.tk and self.kv_heads == self.heads),
             "self-attention needs tq == tk and kv_heads == heads")
        need(self.scale is None or (math.isfinite(self.scale) and self.scale >= 0), "scale must be a finite number >= 0")
        need(self.window is None or (isinstance(self.window, tuple) and len(self.window) == 2 and all(
            isinstance(w, int) and not isinstance(w, bool) and w >= 0 for w in self.window)),
             f"window {self.window!r} must be (left, right), two integers >= 0")
        need(self.causal_align in CAUSAL_ALIGNS, f"causal_align {self.causal_align!r} is not one of {CAUSAL_ALIGNS}")
        if self.varlen is not None:
            need(isinstance(self.varlen, tuple) and len(self.varlen) >= 1 and all(
                isinstance(p, tuple) and len(p) == 2 and all(isinstance(n, int) and n >= 0 for n in p)
                for p in self.varlen), "varlen must be ((query length, key length), ...), integers >= 0")
            need(self.batch == 1, "packed sequences (varlen) have batch 1")
            need((self.tq, self.tk) == (sum(p[0] for p in self.varlen), sum(p[1] for p in self.varlen)),
                 "tq and tk must be the sums of the varlen query and key lengths")
        if self.kv_dtype is not None:
            need(self.kv_dtype in DTYPES and self.kv_dtype != self.dtype,
                 f"kv_dtype {self.kv_dtype!r} must be one of {DTYPES} other than dtype (or unset)")
            need(not self.grad and not self.self_attention, "a KV cache in another dtype is forward-only, never self")
        if self.cache_seqlens is not None or self.page_size is not None:
            from harness.decode import decode_problem

            problem = decode_problem(self)
            need(problem is None, problem or "")
        need(self.causal_align == "top_left" or self.causal or self.window is not None,
             "causal_align='bottom_right' aligns causal masking or a window: set causal=True or a window")

    @property
    def id(self) -> str:
        heads = f"H{self.heads}" if self.kv_heads == self.heads else f"H{self.heads}/{self.kv_heads}"
        seq = f"T{self.tq}" if self.tq == self.tk else f"T{self.tq}x{self.tk}"
        parts = [f"B{self.batch}", heads, seq, f"d{self.d}", self.dtype]
        if self.kv_dtype is not None:
            parts.append(f"kv={self.kv_dtype}")
        if self.device != "cpu":
            parts.append(self.device)
        if self.causal:
            parts.append("causal")
        if self.window is not None:
            parts.append("window=" + ",".join(map(str, self.window)))
        if self.causal_align != "top_left":
            parts.append(self.causal_align)
        if self.varlen is not None:
            parts.append("varlen=" + ",".join(str(a) if a == b else f"{a}x{b}" for a, b in self.varlen))
        if self.cache_seqlens is not None or self.page_size is not None:
            from harness.decode import decode_id_parts

            parts.extend(decode_id_parts(self))
        if self.mask != "none":
            parts.append(f"mask={self.mask}" + ("" if self.mask_rank == "full" else f"/{self.mask_rank}"))
        if self.bias != "none":
            parts.append(f"bias={self.bias}")
        if self.scale is not None:
            parts.append(f"scale={self.scale:g}")
        if self.inputs != "randn":
            parts.append(f"in={self.inputs}")
        if self.layout != "contiguous":
            parts.append(self.layout)
        if self.aux_layout != "contiguous":
            parts.append(f"aux={self.aux_layout}")
        if self.self_attention:
            parts.append("self")
        if self.grad:
            parts.append("grad")
        if self.kind != "kernel":
            parts.insert(0, self.kind)
        return "-".join(parts)

    @property
    def structures(self) -> frozenset[str]:
        """The structures this case uses ("window", "bottom_right", "varlen"): what an implementation must take
        natively (``register(structures=...)``) or receive as a dense mask instead."""
        used = set()
        if self.window is not None:
            used.add("window")
        if self.causal_align == "bottom_right":
            used.add("bottom_right")
        if self.varlen is not None:
            used.add("varlen")
        if self.cache_seqlens is not None:
            used.add("cache_seqlens")
        if self.page_size is not None:
            used.add("paged")
        return frozenset(used)

    def to_dict(self) -> dict[str, Any]:
        """As :meth:`CaseRecord.to_dict`, less ``kv_dtype`` when unset: result files stay as they were."""
        data = super().to_dict()
        if self.kv_dtype is None:
            del data["kv_dtype"]
        return data

    def structure_kwargs(self) -> dict[str, Any]:
        """``window``, ``causal_align``, ``varlen`` (and ``cache_seqlens`` when set) as keywords of
        :func:`harness.oracle.reference_attention`."""
        kwargs: dict[str, Any] = {"window": self.window, "causal_align": self.causal_align, "varlen": self.varlen}
        if self.cache_seqlens is not None:
            kwargs["cache_seqlens"] = self.cache_seqlens
        return kwargs

    def dense_mask_bytes(self) -> int:
        """Bytes of the boolean mask the harness builds when it folds this case's structure into ``mask=``:
        (Tq, Tk) broadcast against the case's own mask."""
        b, h = self.batch, self.heads
        lead = {"none": 1, "2d": 1, "3d": h, "bcast_heads": b}.get(self.mask_rank, b * h)
        if self.mask == "none":
            lead = 1
        elif self.mask_rank == "full" and self.mask == "key_padding":
            lead = b
        if self.cache_seqlens is not None and (self.mask == "none" or self.mask_rank in ("2d", "3d")):
            lead *= b  # per-element cache lengths: the mask is per batch element too
        return lead * self.tq * self.tk

    @property
    def effective_scale(self) -> float:
        return self.scale if self.scale is not None else 1.0 / float(self.d) ** 0.5

