"""Adapting a call to a kernel's declared :class:`~harness.contract.conventions.Conventions`: :func:`adapt` wraps a
plugin's ``prepare`` so it receives its inputs in its own convention and gives back the contract's output, and
:func:`adapt_module` does the same for a module's mask. The record (what a plugin declares) is
:mod:`harness.contract.conventions`; this is what the harness does with it.

Each adaptation is exact (the kernel is asked the same question the oracle answers):

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
from typing import TYPE_CHECKING, Any

from harness.contract.conventions import WITH_LSE, Conventions

if TYPE_CHECKING:
    import torch


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

    tq = q.shape[2]
    realigned, fold = _causal_plan(conv, causal, mask is not None, tq, k.shape[2], causal_top_left)
    if realigned and not fold:
        k, v, mask, rest = _first_keys(tq, k, v, mask, rest)
    if fold:
        mask, causal = _causal_folded(mask, tq, k.shape[2], q.device), False
    if mask is not None and mask.dim() < 4:  # (Tq, Tk) or (H, Tq, Tk) as (1, 1, Tq, Tk), (1, H, Tq, Tk): one reading
        mask = mask[(None,) * (4 - mask.dim())]
    order = _kernel_head_order(conv, q.shape[1], k.shape[1], q.device)
    if order is not None:
        q, mask, rest = _heads_reordered(order, q, mask, rest)
    if conv.takes_scale is False and scale is not None:
        q = q * (scale * math.sqrt(q.shape[3]))
    if conv.layout == "BTHD":
        q, k, v = (x.transpose(1, 2) for x in (q, k, v))
    kwargs: dict[str, Any] = {"mask": _mask_in_kind(conv, mask, q), **rest}
    if conv.takes_causal:
        kwargs["causal"] = causal
    if conv.takes_scale:
        kwargs["scale"] = scale
    inverse = torch.argsort(order) if order is not None else None
    return q, k, v, kwargs, _restorer(conv, inverse, tq)


def _causal_plan(conv: Conventions, causal: bool, masked: bool, tq: int, tk: int, causal_top_left: bool,
                 ) -> tuple[bool, bool]:
    """(realigned, fold): whether a top-left causal call meets a kernel aligned otherwise with Tq != Tk, and whether
    causal masking must be folded into the mask (the kernel takes no ``causal``, cannot combine it with a mask, or
    is realigned where cutting keys is not enough: Tq > Tk, or a mask whose empty rows must see every key)."""
    realigned = causal_top_left and tq != tk
    fold = causal and (not conv.takes_causal or (realigned and (tq > tk or masked))
                       or (masked and not conv.causal_with_mask))
    return realigned, fold


def _first_keys(tq: int, k: torch.Tensor, v: torch.Tensor, mask: Any, rest: dict[str, Any],
                ) -> tuple[torch.Tensor, torch.Tensor, Any, dict[str, Any]]:
    """k, v, the mask, a bias and an FP8 cache's per-token scales cut to the first Tq keys: top-left causal never
    reaches keys j >= Tq, and both alignments agree on the rest."""
    import torch

    tk = k.shape[2]
    k, v = k[:, :, :tq], v[:, :, :tq]
    if mask is not None and mask.shape[-1] == tk:
        mask = mask[..., :tq]
    for name in ("bias", "k_scale", "v_scale"):  # a scale per key is (B, Hkv, Tk); per tensor or head: untouched
        x = rest.get(name)
        if isinstance(x, torch.Tensor) and (name == "bias" or x.dim() == 3) and x.shape[-1] == tk:
            rest = {**rest, name: x[..., :tq]}
    return k, v, mask, rest


def _causal_folded(mask: Any, tq: int, tk: int, device: torch.device) -> torch.Tensor:
    """The boolean mask with top-left causal masking folded in (the causal mask alone when there is none)."""
    import torch

    from harness.reference.oracle import structure_allowed

    allowed = structure_allowed(tq, tk, causal=True, device=device)
    assert allowed is not None
    return allowed if mask is None else (mask.to(torch.bool) & allowed)


def _kernel_head_order(conv: Conventions, heads: int, kv_heads: int, device: torch.device) -> torch.Tensor | None:
    """For each of the kernel's query heads, the contract's head it is (None when the two orders agree): with
    ``h%Hkv`` the kernel's head ``r * Hkv + j`` is the contract's ``j * g + r``."""
    import torch

    if conv.gqa_head_map != "h%Hkv" or not 1 < kv_heads < heads:
        return None
    return torch.arange(heads, device=device).view(kv_heads, heads // kv_heads).t().reshape(-1)


def _heads_reordered(order: torch.Tensor, q: torch.Tensor, mask: Any, rest: dict[str, Any],
                     ) -> tuple[torch.Tensor, Any, dict[str, Any]]:
    """q, the mask and the per-head keywords (bias, sinks) in the kernel's head order."""
    import torch

    heads = q.shape[1]
    q = q.index_select(1, order)
    mask = _heads_permuted(mask, order, heads)
    if "bias" in rest:
        rest = {**rest, "bias": _heads_permuted(rest["bias"], order, heads)}
    if isinstance(rest.get("sinks"), torch.Tensor):  # one per query head: in the kernel's head order too
        rest = {**rest, "sinks": rest["sinks"].index_select(0, order)}
    return q, mask, rest


def _mask_in_kind(conv: Conventions, mask: Any, q: torch.Tensor) -> Any:
    """The rank-4 boolean mask as ``conv.mask_kind`` asks: as is, additive in q's dtype, or (B, Tk) key padding."""
    import torch

    if mask is None or conv.mask_kind == "bool":
        return mask
    if conv.mask_kind == "additive":
        zero = torch.zeros((), dtype=q.dtype, device=q.device)
        return torch.where(mask.to(torch.bool), zero, zero + torch.finfo(q.dtype).min)
    return mask.to(torch.bool)[:, 0, 0, :]  # a key-padding case's mask is the same for every head and query


def _restorer(conv: Conventions, inverse: torch.Tensor | None, tq: int) -> Callable[..., Any]:
    """The function that brings a kernel's answer back to the contract's: the output (B, H, Tq, d) in the contract's
    head order, and with ``with_lse=True`` the pair ``(out, lse)``."""
    import torch

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

    return restore


def _heads_permuted(x: Any, order: torch.Tensor, heads: int) -> Any:
    """A mask or bias with a head dimension (third from the end) of size H, in the kernel's head order."""
    if x is None or x.dim() < 3 or x.shape[-3] != heads:
        return x
    return x.index_select(x.dim() - 3, order)
