"""Declared conventions: how a third-party kernel lays out, masks and answers, so attnbench adapts, not the plugin.

Real attention functions differ from the contract (``(B, H, T, d)``, boolean ``mask=``, ``scale=``, top-left
causal masking, query head h reading kv head ``h // (H / Hkv)``, zeros for a row with no allowed key) in ways
that are conventions, not bugs. A plugin declares its own in ``register(..., conventions=Conventions(...))``
and writes no translation code: :mod:`harness.contract.adaptation` wraps its ``prepare`` so it receives its
inputs in its own convention and gives back the contract's output, and the verifier compares rows with no allowed key by the
declared ``empty_row`` (:func:`empty_rows`). Every verify result names the conventions its verdict assumed
(:meth:`Conventions.describe`); :meth:`Conventions.unusual` says plainly which are unusual and why that matters.

This module is the record (and what a verdict reads from it); how each convention is adapted, exactly, is
:mod:`harness.contract.adaptation`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from harness.errors import PluginError

if TYPE_CHECKING:
    import torch

    from harness.case.attention import AttentionCase

LAYOUTS = ("BHTD", "BTHD")
CAUSAL_ALIGNS = ("top_left", "bottom_right")
GQA_HEAD_MAPS = ("h//g", "h%Hkv")
EMPTY_ROWS = ("zeros", "mean_v", "nan", "unspecified")
"""A row with no allowed key: zeros (the contract, FlashAttention); the mean of V over all keys (a finite
"masked" logit such as HF's ``finfo.min`` makes the softmax uniform); NaN (-inf logits, 0/0); unspecified
(those rows are skipped, and the result says so)."""
MASK_KINDS = ("bool", "additive", "key_padding")
RETURNS = ("out", "out_lse", "out_aux")
LSE_BASES = ("e", "2")
"""The log a returned LSE is in: natural (FlashAttention's ``softmax_lse``, xformers), or base 2 (kernels that
run the softmax on ``exp2`` with ``log2(e)`` folded into the scale, as Triton's fused-attention tutorial's ``M``)."""
LSE_LAYOUTS = ("BHT", "BTH")
WITH_LSE = "attnbench_with_lse"
"""The keyword that asks an adapted ``returns="out_lse"`` kernel for ``(out, lse)`` instead of ``out``: used by the
LSE check only, consumed by the adaptation (the kernel never sees it)."""
KEY_PADDING_MASKS = ("key_padding", "key_padding_left", "key_padding_holes")
MODULE_FIELDS = ("mask_kind", "takes_causal")
"""What a module can declare: the rest (layout, GQA, scale, ...) is inside the layer, which gets x and its weights."""


@dataclass(frozen=True)
class Conventions:
    """A kernel's conventions (the defaults are the contract's, which need no adaptation)."""

    layout: str = "BHTD"
    """How q, k and v are laid out: (B, H, T, d) or (B, T, H, d)."""
    out_layout: str = ""
    """How the output is laid out; empty: as ``layout``."""
    causal_align: str = "top_left"
    """Where ``causal=True`` puts the diagonal when Tq != Tk: top-left (SDPA's ``is_causal``) or bottom-right
    (FlashAttention 2.1+, a KV cache's new queries)."""
    gqa_head_map: str = "h//g"
    """Which kv head query head h reads: h // g (SDPA's ``enable_gqa``, HF's ``repeat_kv``) or h % Hkv."""
    empty_row: str = "zeros"
    """The output of a query row with no allowed key (:data:`EMPTY_ROWS`)."""
    mask_kind: str = "bool"
    """bool (True = may attend), additive (0 / a very negative number) or key_padding ((B, Tk) booleans)."""
    takes_scale: bool = True
    """False: the function has no ``scale`` parameter and always scales by 1/sqrt(d)."""
    takes_causal: bool = True
    """False: the function has no ``causal`` parameter; causal masking arrives in the mask."""
    causal_with_mask: bool = True
    """False: ``causal=True`` and a mask cannot be combined (SDPA's ``is_causal`` with ``attn_mask``): with a mask,
    causal masking arrives folded into it."""
    returns: str = "out"
    """out; (out, lse); (out, anything else)."""
    lse_base: str = "e"
    """With ``returns="out_lse"``: the LSE's log base, e or 2 (:data:`LSE_BASES`)."""
    lse_layout: str = "BHT"
    """With ``returns="out_lse"``: the LSE's shape, (B, H, Tq) or (B, Tq, H); Tq may be padded past the case's."""

    def __post_init__(self) -> None:
        for name, allowed in (("layout", LAYOUTS), ("causal_align", CAUSAL_ALIGNS), ("gqa_head_map", GQA_HEAD_MAPS),
                              ("empty_row", EMPTY_ROWS), ("mask_kind", MASK_KINDS), ("returns", RETURNS),
                              ("lse_base", LSE_BASES), ("lse_layout", LSE_LAYOUTS)):
            if getattr(self, name) not in allowed:
                raise PluginError(f"Conventions({name}={getattr(self, name)!r}): choose one of {allowed}")
        if self.out_layout not in ("", *LAYOUTS):
            raise PluginError(f"Conventions(out_layout={self.out_layout!r}): choose one of {LAYOUTS} or leave it out")
        for name in ("takes_scale", "takes_causal", "causal_with_mask"):
            if not isinstance(getattr(self, name), bool):
                raise PluginError(f"Conventions({name}={getattr(self, name)!r}) must be True or False")
        if not self.out_layout:
            object.__setattr__(self, "out_layout", self.layout)
        if self.returns != "out_lse" and (self.lse_base, self.lse_layout) != ("e", "BHT"):
            raise PluginError("Conventions(lse_base=..., lse_layout=...) describe a returned LSE: declare "
                              "returns='out_lse' too")

    @property
    def is_contract(self) -> bool:
        """Whether these are the contract's own conventions (nothing to adapt, nothing to say)."""
        return self == CONTRACT

    def describe(self) -> dict[str, object]:
        """The conventions as plain data: what each verify result records its verdict assumed."""
        return asdict(self)

    def unusual(self) -> list[str]:
        """Plain sentences for the conventions a reader should not take for granted."""
        notes = []
        if self.gqa_head_map == "h%Hkv":
            notes.append("query head h reads kv head h % Hkv (not h // g as SDPA and HF do): a checkpoint ported "
                         "from another convention mixes heads")
        if self.causal_align == "bottom_right":
            notes.append("causal masking is aligned bottom-right: with Tq != Tk it differs from SDPA's is_causal")
        if self.empty_row == "mean_v":
            notes.append("a row with no allowed key returns the mean of V over all keys, not zeros")
        if self.empty_row == "nan":
            notes.append("a row with no allowed key returns NaN")
        if self.empty_row == "unspecified":
            notes.append("rows with no allowed key are skipped: their value is unspecified")
        if self.returns == "out_lse" and self.lse_base == "2":
            notes.append("the returned log-sum-exp is base 2: code that reads it as FlashAttention's natural-log "
                         "softmax_lse (merging split-KV partials, say) is off by a factor ln 2")
        return notes

    def module_problem(self) -> str | None:
        """Why these conventions cannot be a module's (None: they can)."""
        fields = [name for name, value in asdict(self).items()
                  if name not in MODULE_FIELDS and value != getattr(CONTRACT, name)]
        if fields:
            return (f"a module declares only {MODULE_FIELDS} (its layout, heads and scale are inside the layer); "
                    f"it declared {fields}")
        if self.mask_kind == "key_padding":
            return "a module's mask is key padding already: declare mask_kind 'bool' or 'additive' (a 4-D mask)"
        return None

    def reasons(self, case: AttentionCase, mask_taken: bool, native: tuple[str, ...] = ()) -> list[str]:
        """Why a case cannot be passed in these conventions (empty: it can), given whether the kernel takes masks
        and the structures it takes natively."""
        realigned = case.causal and case.tq != case.tk and self.causal_align == "bottom_right" \
            and case.causal_align == "top_left"
        folds = (case.causal and not self.takes_causal
                 or realigned and (case.tq > case.tk or case.mask != "none"))
        if folds and not mask_taken:
            return [f"causal masking must be folded into mask= here (the kernel {self._causal_words()}), "
                    "and it declares no masks"]
        if self.mask_kind == "key_padding":
            if folds:
                return [f"causal masking must be folded into a mask, and the kernel takes key-padding masks only "
                        f"({self._causal_words()})"]
            if case.mask != "none" and (case.mask not in KEY_PADDING_MASKS or case.mask_rank != "full"):
                return [f"the kernel takes (B, Tk) key-padding masks only (case mask: {case.mask}/{case.mask_rank})"]
            folded = case.structures - set(native)
            if folded:
                return [f"the kernel takes (B, Tk) key-padding masks only; structures {sorted(folded)} "
                        "would be folded into a full mask"]
        return []

    def _causal_words(self) -> str:
        return "takes no causal= argument" if not self.takes_causal else "aligns causal masking bottom-right"


CONTRACT = Conventions()


def empty_rows(allowed: torch.Tensor | None, shape: tuple[int, int, int]) -> torch.Tensor | None:
    """Boolean (B, H, Tq) of rows with no allowed key, or None when there are none."""
    if allowed is None:
        return None
    rows = ~allowed.any(dim=-1)
    if not bool(rows.any()):
        return None
    return rows.expand(shape)
