"""Inputs for a case: seeded, drawn in float64, rounded to the case's dtype, laid out as asked.

Inputs are drawn on the CPU in float64 from a seeded generator, so every backend and
device sees the same numbers; the float64 copies kept for the oracle are the
*rounded* values, so the oracle answers the question the implementation was asked
(an FP8 cache's: the stored values times their scales, :mod:`harness.reference.quantize`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from harness.case.attention import AttentionCase
from harness.case.dtypes import TABLE
from harness.case.layouts import OFFSET, QKV_SWAP, in_layout, numpy_layout, torch_layout
from harness.case.quantized import is_fp8
from harness.case.structures import CAUSAL, dense_kwargs, folded_names, native_kwargs, structure_types
from harness.case.structures.base import StructureKeywords
from harness.reference.masks import make_mask
from harness.reference.oracle import allowed_keys
from harness.reference.quantize import FP8_TORCH, QuantizedCache, quantize_cache

__all__ = ["GRAD_VIA", "OFFSET", "TORCH_DTYPES", "Inputs", "backward_grads", "dtype_name", "make_inputs", "to_float64"]

TORCH_DTYPES: dict[str, torch.dtype] = {name: t.torch() for name, t in TABLE.items()}
STORAGE_DTYPES: dict[str, torch.dtype] = {**TORCH_DTYPES, **FP8_TORCH}
"""Every type a KV cache may be stored in (the FP8 ones only there)."""
DTYPE_NAMES = {v: k for k, v in STORAGE_DTYPES.items()}


@dataclass
class Inputs:
    """One trial's inputs: ``q, k, v, mask`` for the implementation, ``*64`` for the oracle."""

    q: Any
    k: Any
    v: Any
    mask: Any | None
    q64: torch.Tensor
    k64: torch.Tensor
    v64: torch.Tensor
    mask64: torch.Tensor | None
    bias: Any | None = None
    """Additive score bias (case.bias != "none"), in the case's dtype; passed as ``bias=``."""
    bias64: torch.Tensor | None = None
    k_pages: Any | None = None
    """A paged case (``page_size``): K as a page pool (num_pages, Hkv, page_size, d), for implementations that
    declare ``structures=("paged",)``; ``k`` holds the same keys contiguous for the others."""
    v_pages: Any | None = None
    block_table: Any | None = None
    """(B, pages per sequence): the page of each sequence's p-th ``page_size`` keys (int32 tensor / int64 array)."""
    sinks: Any | None = None
    """A case with ``sinks``: the per-head sink logits (H,) in q's dtype, passed as ``sinks=``."""
    sinks64: torch.Tensor | None = None
    k_scale: Any | None = None
    """An FP8 cache (``kv_scales``): K's float32 scales as passed (``k_scale=``), of the layout's shape."""
    v_scale: Any | None = None
    k_scale_pages: Any | None = None
    """A paged FP8 cache with per-token scales: K's scales laid out as its pages (num_pages, Hkv, page_size), passed
    instead of ``k_scale`` to an implementation that takes the pages."""
    v_scale_pages: Any | None = None
    quantized: QuantizedCache | None = None
    """An FP8 cache as stored, with its scales and its unquantised values (the quantisation check reads them)."""

    def arrays(self, structures: Iterable[str] = ()) -> tuple[Any, Any, Any]:
        """(q, k, v) as an implementation taking ``structures`` natively receives them: laid out by a declared
        layout structure (the page pools of a paged case), else the contiguous arrays."""
        laid_out = (t.native_arrays(self) for t in structure_types() if t.name in frozenset(structures))
        return next((arrays for arrays in laid_out if arrays is not None), (self.q, self.k, self.v))

    def kwargs(self, case: AttentionCase, structures: Iterable[str] = ()) -> dict[str, object]:
        """The keyword arguments of the contract for this case (``bias`` only when the case has one), passed through
        to the implementation as they are.

        ``structures`` are those the implementation takes natively (``register(structures=...)``): each
        declared structure adds its keywords (:meth:`harness.case.structures.Structure.native_kwargs`); every
        structure of the case it does not take, and every one evaluated inside a frame it does not take
        (bottom-right alignment folded takes causal masking and the window with it; packed sequences folded
        take everything), is folded into a dense boolean mask with the case's own mask, built here, before
        any timing (:func:`harness.case.structures.folded_names`).
        """
        native = frozenset(structures)
        parts = case.structure_parts
        folded = folded_names(parts, native, case.causal)
        kwargs: dict[str, object] = {"causal": case.causal and CAUSAL not in folded, "mask": self.mask, "scale": case.scale}
        if self.k_scale is not None:  # an FP8 cache's scales (a paged kernel's: as its pages, the paged structure's)
            kwargs.update(k_scale=self.k_scale, v_scale=self.v_scale)
        dense = dense_kwargs(parts, folded)
        if dense is not None:
            kwargs["mask"] = self._dense(case, allowed_keys(case.tq, case.tk, causal=CAUSAL in folded, mask=None,
                                                            device=case.device, **dense))
        kwargs.update(native_kwargs(case, self, native, folded))
        if self.bias is not None:
            kwargs["bias"] = self.bias
        if self.sinks is not None:
            kwargs["sinks"] = self.sinks
        if case.softcap is not None:
            kwargs["softcap"] = case.softcap
        return kwargs

    def index_array(self, values: Sequence[int] | None, case: AttentionCase) -> Any:
        """Integers as the implementation's kind of index array (int32 tensor, int64 array), None stays None."""
        if values is None:
            return None
        if isinstance(self.q, torch.Tensor):
            return aux(torch.tensor(values, dtype=torch.int32, device=case.device), case, "index")
        return aux(np.asarray(values, dtype=np.int64), case, "index")

    def _dense(self, case: AttentionCase, allowed: Any) -> Any:
        """``allowed`` (Tq, Tk) combined with the case's mask, as the implementation's kind of array."""
        if isinstance(self.q, torch.Tensor):
            return aux(allowed if self.mask is None else (allowed & self.mask.to(torch.bool)), case)
        dense = allowed.cpu().numpy()
        return aux(dense if self.mask is None else np.logical_and(dense, self.mask), case)

    def oracle_kwargs(self, case: AttentionCase) -> OracleKeywords:
        """The same call for :func:`harness.reference.oracle.reference_attention`, in float64 (structure given natively)."""
        return {"causal": case.causal, "mask": self.mask64, "scale": case.scale, "bias": self.bias64,
                "sinks": self.sinks64, "softcap": case.softcap, **case.structure_kwargs()}


class OracleKeywords(StructureKeywords, total=False):
    """The keywords of :func:`harness.reference.oracle.reference_attention` for one trial (:meth:`Inputs.oracle_kwargs`)."""

    causal: bool
    mask: Any
    scale: float | None
    bias: Any
    sinks: Any
    softcap: float | None


def aux(x: Any, case: AttentionCase, tensor: str = "mask") -> Any:
    """An array the contract passes besides q, k and v (``tensor``: mask, bias, dout for the upstream gradient,
    index for cache lengths, block table, cumulative lengths) in its layout (``case.layout_of``): the case's
    ``aux_layout`` unless ``case.layouts`` gives it one of its own; unchanged when that is contiguous."""
    layout = case.layout_of(tensor)
    return x if layout == "contiguous" else in_layout(x, layout)


GRAD_VIA = "backward"
"""How verify and bench take gradients: ``torch.autograd.backward(out, dO)``, then each leaf's ``.grad``, as a
training loop does. ``torch.autograd.grad`` refuses re-entrant checkpointing (``torch.utils.checkpoint(...,
use_reentrant=True)``, as lucidrains' ``memory_efficient_attention`` uses), which is correct code: asked that
way it would be failed for how it was asked."""


def backward_grads(out: torch.Tensor, leaves: Sequence[torch.Tensor], grad_out: torch.Tensor,
                   retain_graph: bool = False) -> tuple[torch.Tensor | None, ...]:
    """The leaves' gradients of ``out`` under upstream gradient ``grad_out``, by :data:`GRAD_VIA`; a leaf passed
    more than once (self-attention's q = k = v) gets its accumulated gradient once, then None."""
    for leaf in leaves:
        leaf.grad = None
    torch.autograd.backward(out, grad_out, retain_graph=retain_graph)
    return tuple(None if any(leaf is other for other in leaves[:i]) else leaf.grad for i, leaf in enumerate(leaves))


def dtype_name(x: Any) -> str:
    """'float32' for a torch tensor or numpy array of that dtype."""
    if isinstance(x, torch.Tensor):
        return DTYPE_NAMES.get(x.dtype, str(x.dtype))
    return str(np.asarray(x).dtype) if not isinstance(x, np.ndarray) else str(x.dtype)


def to_float64(x: Any) -> torch.Tensor:
    """Any backend's array as a CPU float64 tensor (for comparison with the oracle)."""
    if isinstance(x, torch.Tensor):
        return x.detach().to("cpu", torch.float64)
    return torch.from_numpy(np.asarray(x, dtype=np.float64).copy())


def _to_backend(x: torch.Tensor, backend: str, layout: str) -> Any:
    """q, k or v (B, H, T, d) as the backend's array in the case's layout (:mod:`harness.case.layouts`)."""
    if backend == "torch":
        return torch_layout(x, layout, QKV_SWAP)
    return numpy_layout(x.cpu().numpy(), layout, QKV_SWAP)


def wide_scale(dtype: torch.dtype) -> float:
    """V's scale for ``inputs="wide"``: the power of two nearest the square root of the dtype's largest value."""
    return 2.0 ** round(math.log2(torch.finfo(dtype).max) / 2)


HUGE_LOGIT = 1e5
"""``inputs="huge"``: the offset of every scaled logit of a row (both signs) in float32, float64 and bfloat16."""
HUGE_FLOAT16_PRODUCT = 7e4
"""``inputs="huge"`` in float16: the offset of the raw q.k, past float16's 65,504 before the scale brings it back."""
HALF_SCALED_LOGIT = 3.2e4
"""The largest scaled logit a float16 ``huge`` case asks for: a kernel that keeps scaled scores in float16 still
represents it (with scale 1 the raw product stays inside float16 too)."""
TINY = 2.0 ** -5
"""``inputs="tiny"``: q and k are randn times this (logits near 1e-3 at d = 64)."""


def huge_logits(q: torch.Tensor, k: torch.Tensor, case: AttentionCase, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """q and k (float64) whose logits are their randn logits plus one constant per query row, +-C at the edge of
    the dtype's range (:data:`HUGE_LOGIT`, :data:`HUGE_FLOAT16_PRODUCT`): K loses its component along u = (1, ..., 1)
    / sqrt(d) and gains sqrt(C') u, each query row gains +-sqrt(C') u (the first row +, the second -, the rest
    random), so q.k = q0.k0' + const(row). Softmax ignores the offset; a kernel that overflows or starts its running
    max at a finite value does not."""
    d = case.d
    u = torch.full((d,), d ** -0.5, dtype=torch.float64)
    scale = case.effective_scale or 1.0
    if "float16" in (case.dtype, case.kv_dtype):  # the raw product past 65,504, the scaled logit well inside it
        raw = min(HUGE_FLOAT16_PRODUCT, HALF_SCALED_LOGIT / scale)
    else:
        raw = HUGE_LOGIT / scale
    signs = torch.where(torch.rand(case.batch, case.heads, case.tq, 1, generator=gen, dtype=torch.float64) < 0.5, -1.0, 1.0)
    signs[..., 0, :] = 1.0
    if case.tq > 1:
        signs[..., 1, :] = -1.0
    k = k - (k @ u)[..., None] * u + raw ** 0.5 * u
    return q + signs * raw ** 0.5 * u, k


def make_inputs(case: AttentionCase, seed: int, backend: str = "torch", float64: bool = True) -> Inputs:
    """Draw one trial of the case; ``backend`` is "torch" or "numpy" (arrays of that kind). The generator is read
    in a fixed order (q, k, v, the mask, an FP8 cache's spread, the structures, the sinks), so adding a later kind of
    input leaves every earlier one as it was. ``float64=False`` leaves out the float64 copies of q, k and v (``q64``...:
    None) and an FP8 cache's unquantised values, for a caller that reads the live arrays instead (bench: a decode
    cache's copy is gigabytes)."""
    gen = torch.Generator().manual_seed(seed)
    dtype = TORCH_DTYPES[case.dtype]
    kv_dtype = STORAGE_DTYPES[case.kv_dtype or case.dtype]  # a KV cache may be stored in its own dtype
    if backend != "torch" and is_fp8(case):
        raise ValueError(f"{case.id}: NumPy has no FP8 type; an FP8 KV cache is passed as torch tensors only")
    q, k, v = _drawn_qkv(case, gen, kv_dtype)
    mask = make_mask(case, gen)
    quantized = quantize_cache(case, k, v, gen) if is_fp8(case) else None  # after the mask: other cases unchanged
    q = q.to(dtype)
    k, v = (quantized.k.stored, quantized.v.stored) if quantized is not None else (k.to(kv_dtype), v.to(kv_dtype))
    q64, k64, v64 = (x.to(torch.float64) for x in (q, k, v)) if float64 else (None, None, None)
    if quantized is not None and float64:
        k64, v64 = quantized.dequantized()
    qb, kb, vb, mb = _placed(case, q, k, v, mask, backend)
    bias, bias64 = _alibi(case, dtype, backend) if case.bias == "alibi" else (None, None)
    inputs = Inputs(qb, kb, vb, mb, q64, k64, v64, mask, bias, bias64)  # type: ignore[arg-type]  # None: float64=False
    if quantized is not None:
        if not float64:  # bench keeps no unquantised copy of a cache of gigabytes
            quantized.k.exact = quantized.v.exact = None
        inputs.quantized = quantized
        inputs.k_scale, inputs.v_scale = (aux(x.scale.to(case.device), case, "scale") for x in (quantized.k, quantized.v))
    for part in case.structure_parts:  # drawn last: every other case's inputs stay as they were
        part.draw(inputs, case, k, v, gen, backend)
    if case.sinks:  # after everything else, for the same reason
        sinks = torch.randn(case.heads, generator=gen, dtype=torch.float64).to(dtype)
        inputs.sinks64 = sinks.to(torch.float64)
        inputs.sinks = sinks.to(case.device) if backend == "torch" else sinks.numpy().astype(case.dtype)
    return inputs


def _drawn_qkv(case: AttentionCase, gen: torch.Generator, kv_dtype: torch.dtype,
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q, k and v as the case's ``inputs`` asks (self-attention: one tensor for all three): in float64, or as a
    plain float32 draw where no transform follows (exact in float64, so rounding it to the case's dtype gives the
    value the float64 draw would: one rounding either way)."""
    b, h, hkv, tq, tk, d = case.batch, case.heads, case.kv_heads, case.tq, case.tk, case.d
    # Drawn in float32 unless the case keeps float64 inputs: every other dtype rounds the draw to 24 bits or
    # fewer anyway, and float32's generator is 3-5x cheaper per element (the draw was a fifth of verify's time).
    drawn = torch.float64 if torch.float64 in (TORCH_DTYPES[case.dtype], kv_dtype) else torch.float32

    plain = case.inputs in ("randn", "rand")  # no transform in float64 follows: the draw is kept as drawn

    def draw(*shape: int) -> torch.Tensor:
        x = torch.rand(*shape, generator=gen, dtype=drawn) if case.inputs == "rand" \
            else torch.randn(*shape, generator=gen, dtype=drawn)
        return x if plain else x.to(torch.float64)

    q = draw(b, h, tq, d)
    if case.self_attention:  # V is Q, whose logits must stay finite: never "wide"
        q = q * 5.0 if case.inputs == "large" else q
        return q, q, q
    k, v = draw(b, hkv, tk, d), draw(b, hkv, tk, case.value_dim)
    if case.inputs == "large":
        q, k = q * 5.0, k * 3.0
    elif case.inputs == "huge":
        q, k = huge_logits(q, k, case, gen)
    elif case.inputs == "tiny":
        q, k = q * TINY, k * TINY
    elif case.inputs == "wide":
        v = v * wide_scale(kv_dtype)
    return q, k, v


def _placed(case: AttentionCase, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
            backend: str) -> tuple[Any, Any, Any, Any]:
    """q, k, v and the mask as the call receives them: on the case's device (torch) or as arrays (numpy), each in
    its layout; self-attention passes q as all three."""
    if backend == "torch":
        q, k, v = (x.to(case.device) for x in (q, k, v))
        mask_here: Any = None if mask is None else mask.to(case.device)
    else:
        mask_here = None if mask is None else mask.numpy()  # numpy backend: arrays throughout
    mb = None if mask_here is None else aux(mask_here, case)
    qb = _to_backend(q, backend, case.layout_of("q"))
    if case.self_attention:
        return qb, qb, qb, mb
    return qb, _to_backend(k, backend, case.layout_of("k")), _to_backend(v, backend, case.layout_of("v")), mb


def _alibi(case: AttentionCase, dtype: torch.dtype, backend: str) -> tuple[Any, torch.Tensor]:
    """The ALiBi bias as the call receives it, and its float64 copy (rounded through the case's dtype first)."""
    from harness.case.positional import alibi_bias

    bias64 = alibi_bias(case.heads, case.tq, case.tk).to(dtype).to(torch.float64)
    bias = bias64.to(dtype).to(case.device) if backend == "torch" else bias64.numpy().astype(case.dtype)
    return aux(bias, case, "bias"), bias64
