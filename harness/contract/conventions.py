"""Declared conventions: how a third-party kernel lays out, masks and answers, so attnbench adapts, not the plugin.

Real attention functions differ from the contract (``(B, H, T, d)``, boolean ``mask=``, ``scale=``, top-left
causal masking, query head h reading kv head ``h // (H / Hkv)``, zeros for a row with no allowed key) in ways
that are conventions, not bugs. A plugin declares its own in ``register(..., conventions=Conventions(...))``
and writes no translation code: :func:`adapt` wraps its ``prepare`` so it receives its inputs in its own
convention and gives back the contract's output, and the verifier compares rows with no allowed key by the
declared ``empty_row`` (:func:`empty_rows`). Every verify result names the conventions its verdict assumed
(:meth:`Conventions.describe`); :meth:`Conventions.unusual` says plainly which are unusual and why that matters.

The adaptations, each exact (the kernel is asked the same question the oracle answers):

- ``layout="BTHD"``: q, k and v transposed views ``(B, T, H, d)``; ``out_layout`` the output's (HF's attention
  functions take ``(B, H, T, d)`` and return ``(B, T, H, d)``).
- ``gqa_head_map="h%Hkv"`` (x-transformers' ``repeat(t, 'b kvh n d -> b (r kvh) n d')``): query heads are
  permuted so that the kernel's head ``r * Hkv + j`` is the contract's head ``j * g + r``; masks and biases with a
  head dimension likewise; the output is permuted back.
- ``causal_align="bottom_right"``: a top-left causal case with Tq < Tk and no mask never reaches keys j >= Tq,
  so the kernel gets the first Tq keys (where the two alignments coincide); with Tq > Tk, or a mask (whose
  empty rows must see every key, as the oracle's do), causal masking is folded into ``mask=``.
- ``takes_causal=False`` (HF's ``eager_attention_forward``): causal masking folded into the mask;
  ``causal_with_mask=False`` (SDPA): likewise whenever a mask is passed.
- ``mask_kind="additive"``: the boolean mask as 0 / ``finfo(dtype).min`` in q's dtype (what HF builds);
  ``"key_padding"``: a ``(B, Tk)`` boolean (lucidrains), so only key-padding masks can be passed.
- ``takes_scale=False``: q pre-scaled by ``scale * sqrt(d)`` when a scale is asked (the kernel uses 1/sqrt(d)).
- ``returns="out_lse"`` / ``"out_aux"``: the output is the first item of a pair. A returned log-sum-exp is
  checked too: asked with :data:`WITH_LSE`, the adapted call gives ``(out, lse)`` with the LSE as (B, H, Tq) in
  the contract's head order (from ``lse_layout``; a Tq padded to a multiple, as xformers does, cut back), in the
  kernel's base (``lse_base``), which :mod:`harness.verify.lse` holds to the oracle's.
- Masks of rank 2 or 3 arrive as rank 4 (``(1, 1, Tq, Tk)``), as several packages read a 2-D mask as (B, Tk)
  key padding.

A module (``kind="module"``) may declare ``mask_kind`` (``"bool"`` or ``"additive"``) and ``takes_causal``
(:func:`adapt_module`): its key-padding mask then arrives as the 4-D attention mask a layer such as timm's
``Attention`` or SDPA takes, ``(B, 1, 1, Tk)`` (``(B, 1, T, Tk)`` with causal masking folded in when it takes no
``causal``), True = attend or 0 / ``finfo(dtype).min``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

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


def adapt(prepare: Callable[..., Callable[[], Any]], conventions: Conventions,
          keeps_align: bool = False) -> Callable[..., Callable[[], Any]]:
    """``prepare`` in the contract's conventions, given one in ``conventions``: the inputs are adapted before the
    timed closure (set-up), the output's layout and head order inside it. A kernel aligned bottom-right receives
    bottom-right cases as they are (registration declares ``bottom_right`` native for it) and top-left ones
    adapted; ``keeps_align``: the plugin declared ``structures=("bottom_right",)`` itself and reads
    ``causal_align=`` on its own."""
    if conventions.is_contract:
        return prepare

    def adapted(q: Any, k: Any, v: Any, *, causal: bool = False, mask: Any = None, scale: float | None = None,
                **rest: Any) -> Callable[[], Any]:
        with_lse = bool(rest.pop(WITH_LSE, False)) and conventions.returns == "out_lse"
        if conventions.causal_align != "top_left" and not keeps_align:
            asked = rest.pop("causal_align", "top_left")  # added to the native structures by registration
            causal_top_left = causal and asked == "top_left"
        else:
            causal_top_left = False
        q, k, v, kwargs, restore = adapt_inputs(conventions, q, k, v, causal, mask, scale, rest, causal_top_left)
        call = prepare(q, k, v, **kwargs)
        if with_lse:
            return lambda: restore(call(), with_lse=True)
        return lambda: restore(call())

    return adapted


def adapt_module(prepare: Callable[..., Callable[[], Any]], conventions: Conventions,
                 ) -> Callable[..., Callable[[], Any]]:
    """A module's ``prepare`` in the module contract, given one taking a 4-D attention mask (``mask_kind``) and,
    with ``takes_causal=False``, no ``causal`` (causal masking folded into the mask, bottom-right over a KV cache)."""
    if conventions.is_contract:
        return prepare

    def adapted(x: Any, *, mask: Any = None, causal: bool = False, **rest: Any) -> Callable[[], Any]:
        past = rest["past_key"].shape[2] if rest.get("past_key") is not None else 0
        kwargs: dict[str, Any] = {"mask": module_mask(conventions, x, mask, causal, past), **rest}
        if conventions.takes_causal:
            kwargs["causal"] = causal
        return prepare(x, **kwargs)

    return adapted


def module_mask(conv: Conventions, x: torch.Tensor, mask: Any, causal: bool, past: int = 0) -> torch.Tensor | None:
    """The module contract's (B, P + T) key-padding mask (and causal masking, when the module takes no ``causal``)
    as one 4-D attention mask in ``conv.mask_kind``: (B, 1, 1, P + T), or (B, 1, T, P + T) with causal folded in."""
    import torch

    batch, t = x.shape[0], x.shape[1]
    allowed = None
    if causal and not conv.takes_causal:  # new token i sits at key position past + i
        allowed = torch.ones(t, past + t, dtype=torch.bool, device=x.device).tril(past)[None, None]
    if mask is not None:
        keys = torch.as_tensor(mask, device=x.device).to(torch.bool).reshape(batch, 1, 1, past + t)
        allowed = keys if allowed is None else allowed & keys
    if allowed is None or conv.mask_kind == "bool":
        return allowed
    zero = torch.zeros((), dtype=x.dtype, device=x.device)
    return torch.where(allowed, zero, zero + torch.finfo(x.dtype).min)


def adapt_inputs(conv: Conventions, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, mask: Any,
                 scale: float | None, rest: dict[str, Any], causal_top_left: bool = False,
                 ) -> tuple[Any, Any, Any, dict[str, Any], Callable[..., Any]]:
    """(q, k, v, keyword arguments) in ``conv`` for a contract call, and the function that brings the output back
    (``with_lse=True``: ``(out, lse)``, the LSE as (B, H, Tq) in the contract's head order, its padding past Tq cut
    off, in the kernel's own base and dtype; None when the kernel returned no pair).
    ``causal_top_left``: a top-left causal call to a kernel that aligns otherwise."""
    import torch

    from harness.reference.oracle import structure_allowed

    heads, kv_heads, tq, tk, d = q.shape[1], k.shape[1], q.shape[2], k.shape[2], q.shape[3]
    realigned = causal_top_left and tq != tk
    fold = causal and (not conv.takes_causal or (realigned and (tq > tk or mask is not None))
                       or (mask is not None and not conv.causal_with_mask))
    if realigned and not fold:
        k, v = k[:, :, :tq], v[:, :, :tq]  # top-left causal never reaches keys j >= Tq: both alignments agree on the rest
        if mask is not None and mask.shape[-1] == tk:
            mask = mask[..., :tq]
        if isinstance(rest.get("bias"), torch.Tensor) and rest["bias"].shape[-1] == tk:
            rest = {**rest, "bias": rest["bias"][..., :tq]}
    if fold:
        allowed = structure_allowed(tq, k.shape[2], causal=True, device=q.device)
        assert allowed is not None
        mask = allowed if mask is None else (mask.to(torch.bool) & allowed)
        causal = False
    if mask is not None and mask.dim() < 4:  # (Tq, Tk) or (H, Tq, Tk) as (1, 1, Tq, Tk), (1, H, Tq, Tk): one reading
        mask = mask[(None,) * (4 - mask.dim())]
    groups = heads // kv_heads
    permute = conv.gqa_head_map == "h%Hkv" and 1 < kv_heads < heads
    if permute:
        order = torch.arange(heads, device=q.device).view(kv_heads, groups).t().reshape(-1)  # kernel head -> ours
        q = q.index_select(1, order)
        mask = _heads_permuted(mask, order, heads)
        if "bias" in rest:
            rest = {**rest, "bias": _heads_permuted(rest["bias"], order, heads)}
        if isinstance(rest.get("sinks"), torch.Tensor):  # one per query head: in the kernel's head order too
            rest = {**rest, "sinks": rest["sinks"].index_select(0, order)}
    if conv.takes_scale is False and scale is not None:
        q = q * (scale * math.sqrt(d))
    if conv.layout == "BTHD":
        q, k, v = (x.transpose(1, 2) for x in (q, k, v))
    if mask is not None and conv.mask_kind == "additive":
        zero = torch.zeros((), dtype=q.dtype, device=q.device)
        mask = torch.where(mask.to(torch.bool), zero, zero + torch.finfo(q.dtype).min)
    elif mask is not None and conv.mask_kind == "key_padding":
        mask = mask.to(torch.bool)[:, 0, 0, :]  # a key-padding case's mask is the same for every head and query
    kwargs: dict[str, Any] = {"mask": mask, **rest}
    if conv.takes_causal:
        kwargs["causal"] = causal
    if conv.takes_scale:
        kwargs["scale"] = scale
    inverse = torch.argsort(order) if permute else None

    def restore(returned: Any, with_lse: bool = False) -> Any:
        out, lse = returned, None
        if conv.returns != "out":
            out = returned[0]
            lse = returned[1] if isinstance(returned, (tuple, list)) and len(returned) > 1 else None
        if conv.out_layout == "BTHD":
            out = out.transpose(1, 2)
        if inverse is not None:
            out = out.index_select(1, inverse)
        if not with_lse:
            return out
        if isinstance(lse, torch.Tensor) and lse.dim() == 3:
            lse = (lse.transpose(1, 2) if conv.lse_layout == "BTH" else lse)[..., :tq]
            lse = lse if inverse is None else lse.index_select(1, inverse.to(lse.device))
        return out, lse

    return q, k, v, kwargs, restore


def _heads_permuted(x: Any, order: torch.Tensor, heads: int) -> Any:
    """A mask or bias with a head dimension (third from the end) of size H, in the kernel's head order."""
    if x is None or x.dim() < 3 or x.shape[-3] != heads:
        return x
    return x.index_select(x.dim() - 3, order)


def empty_rows(allowed: torch.Tensor | None, shape: tuple[int, int, int]) -> torch.Tensor | None:
    """Boolean (B, H, Tq) of rows with no allowed key, or None when there are none."""
    if allowed is None:
        return None
    rows = ~allowed.any(dim=-1)
    if not bool(rows.any()):
        return None
    return rows.expand(shape)
