"""Inputs for a case: seeded, drawn in float64, rounded to the case's dtype, laid out as asked.

Inputs are drawn on the CPU in float64 from a seeded generator, so every backend and
device sees the same numbers; the float64 copies kept for the oracle are the
*rounded* values, so the oracle answers the question the implementation was asked.
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
from harness.case.structures import CAUSAL, dense_kwargs, folded_names, native_kwargs, structure_types
from harness.case.structures.base import StructureKeywords
from harness.reference.oracle import allowed_keys

__all__ = ["GRAD_VIA", "OFFSET", "TORCH_DTYPES", "Inputs", "backward_grads", "dtype_name", "make_inputs", "to_float64"]

TORCH_DTYPES: dict[str, torch.dtype] = {name: t.torch() for name, t in TABLE.items()}
DTYPE_NAMES = {v: k for k, v in TORCH_DTYPES.items()}


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


def _key_validity(groups: int, tk: int, kind: str, gen: torch.Generator) -> torch.Tensor:
    """(groups, Tk) booleans: which keys each group (batch element, or head) keeps.

    The first group keeps every key (padding shows by contrast) and, with two groups or more,
    the last keeps one key only (padding of length Tk - 1).
    """
    lengths = torch.randint(1, tk + 1, (groups,), generator=gen)
    lengths[0] = tk
    if groups > 1:
        lengths[-1] = 1
    keys = torch.arange(tk)[None, :]
    if kind == "key_padding":
        return keys < lengths[:, None]
    if kind == "key_padding_left":
        return keys >= (tk - lengths)[:, None]
    holes = torch.rand(groups, tk, generator=gen, dtype=torch.float64) < 0.3  # key_padding_holes
    holes[0] = False
    if groups > 1:
        holes[-1] = True
        holes[-1, int(torch.randint(0, tk, (1,), generator=gen))] = False
    return ~holes


def _late_padding(groups: int, tk: int, gen: torch.Generator) -> torch.Tensor:
    """(groups, Tk) key padding where group 0 keeps the fewest keys (about a third), the last every key and the
    others random lengths: padding on elements other than 0, and an element 0 unlike the rest."""
    lengths = torch.randint(1, tk + 1, (groups,), generator=gen)
    lengths[0] = tk // 3 + 1
    if groups > 1:
        lengths[-1] = tk
    return torch.arange(tk)[None, :] < lengths[:, None]


FIRST_BLOCK = 520
"""Keys a ``first_block`` mask masks at the start of its rows once Tk passes it: more than one 512-key block."""


def _first_block(bm: int, hm: int, tq: int, tk: int, gen: torch.Generator) -> torch.Tensor:
    """(bm, hm, Tq, Tk): about half the rows (always the first) have their first max(Tk // 2, 520) keys masked (at
    most Tk - 1: a key stays); the other rows mask a random 10% of keys."""
    prefix = min(tk - 1, max(tk // 2, FIRST_BLOCK))
    mask = torch.rand(bm, hm, tq, tk, generator=gen, dtype=torch.float64) >= 0.1
    rows = torch.rand(bm, hm, tq, generator=gen, dtype=torch.float64) < 0.5
    rows.view(-1)[0] = True
    mask[..., :prefix] &= ~rows[..., None]
    mask[..., prefix:] |= rows[..., None]
    return mask


def _shaped_mask(case: AttentionCase, gen: torch.Generator) -> torch.Tensor:
    """Any mask kind at the case's rank: drawn as (Bm, Hm, Tq, Tk), leading dims dropped for 2d/3d."""
    b, h, tq, tk = case.batch, case.heads, case.tq, case.tk
    bm, hm = {"full": (b, h), "2d": (1, 1), "3d": (1, h), "bcast_heads": (b, 1)}[case.mask_rank]
    if case.mask.startswith("key_padding"):
        if case.mask_rank == "full":  # as key padding is usually given: (B, 1, 1, Tk)
            return _key_validity(b, tk, case.mask, gen).reshape(b, 1, 1, tk)
        mask = _key_validity(bm * hm, tk, case.mask, gen).reshape(bm, hm, 1, tk).expand(bm, hm, tq, tk)
    elif case.mask == "key_padding_late":
        mask = _late_padding(b, tk, gen).reshape(b, 1, 1, tk).expand(bm, hm, tq, tk) if bm == b else \
            _late_padding(bm * hm, tk, gen).reshape(bm, hm, 1, tk).expand(bm, hm, tq, tk)
    elif case.mask == "first_block":
        mask = _first_block(bm, hm, tq, tk, gen)
    elif case.mask == "one_masked":
        masked = torch.randint(0, tk, (bm, hm, tq, 1), generator=gen)
        mask = torch.ones(bm, hm, tq, tk, dtype=torch.bool).scatter_(-1, masked, False)
    else:
        mask = torch.rand(bm, hm, tq, tk, generator=gen, dtype=torch.float64) < 0.7
        if case.mask == "empty_rows":
            empty = torch.rand(bm, hm, tq, generator=gen, dtype=torch.float64) < 0.25
            empty.view(-1)[0] = True
            mask &= ~empty[..., None]
    mask = mask.contiguous()
    return {"2d": mask[0, 0], "3d": mask[0]}.get(case.mask_rank, mask)


def make_mask(case: AttentionCase, gen: torch.Generator) -> torch.Tensor | None:
    """The boolean mask of the case (True = may attend), shaped to broadcast to (B, H, Tq, Tk)."""
    b, h, tq, tk = case.batch, case.heads, case.tq, case.tk
    if case.mask == "none":
        return None
    if case.mask == "key_padding_late" and case.mask_rank == "full":  # as key padding is usually given: (B, 1, 1, Tk)
        return _late_padding(b, tk, gen).reshape(b, 1, 1, tk)
    if case.mask_rank != "full" or case.mask not in ("random", "key_padding", "empty_rows"):
        return _shaped_mask(case, gen)
    if case.mask == "key_padding":
        lengths = torch.randint(1, tk + 1, (b,), generator=gen)
        lengths[0] = tk  # one batch element unpadded, so padding is visible by contrast
        return (torch.arange(tk)[None, :] < lengths[:, None]).reshape(b, 1, 1, tk)
    mask = torch.rand(b, h, tq, tk, generator=gen, dtype=torch.float64) < 0.7
    if case.mask == "empty_rows":
        empty = torch.rand(b, h, tq, generator=gen, dtype=torch.float64) < 0.25
        empty.view(-1)[0] = True
        mask &= ~empty[..., None]
    return mask


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


def make_inputs(case: AttentionCase, seed: int, backend: str = "torch") -> Inputs:
    """Draw one trial of the case; ``backend`` is "torch" or "numpy" (arrays of that kind)."""
    gen = torch.Generator().manual_seed(seed)
    b, h, hkv, tq, tk, d = case.batch, case.heads, case.kv_heads, case.tq, case.tk, case.d

    def draw(*shape: int) -> torch.Tensor:
        if case.inputs == "rand":
            return torch.rand(*shape, generator=gen, dtype=torch.float64)
        return torch.randn(*shape, generator=gen, dtype=torch.float64)

    q = draw(b, h, tq, d)
    if case.self_attention:
        q = q * 5.0 if case.inputs == "large" else q
        k = v = q
    else:
        k, v = draw(b, hkv, tk, d), draw(b, hkv, tk, case.value_dim)
        if case.inputs == "large":
            q, k = q * 5.0, k * 3.0
        elif case.inputs == "huge":
            q, k = huge_logits(q, k, case, gen)
        elif case.inputs == "tiny":
            q, k = q * TINY, k * TINY
    dtype = TORCH_DTYPES[case.dtype]
    kv_dtype = TORCH_DTYPES[case.kv_dtype or case.dtype]  # a KV cache may be stored in its own dtype
    if case.inputs == "wide" and not case.self_attention:  # self-attention: V is Q, whose logits must stay finite
        v = v * wide_scale(kv_dtype)
    mask = make_mask(case, gen)
    q, k, v = q.to(dtype), k.to(kv_dtype), v.to(kv_dtype)
    q64, k64, v64 = (x.to(torch.float64) for x in (q, k, v))
    device = case.device
    if backend == "torch":
        qb = _to_backend(q.to(device), "torch", case.layout_of("q"))
        kb = qb if case.self_attention else _to_backend(k.to(device), "torch", case.layout_of("k"))
        vb = qb if case.self_attention else _to_backend(v.to(device), "torch", case.layout_of("v"))
        mb = None if mask is None else aux(mask.to(device), case)
    else:
        qb = _to_backend(q, "numpy", case.layout_of("q"))
        kb = qb if case.self_attention else _to_backend(k, "numpy", case.layout_of("k"))
        vb = qb if case.self_attention else _to_backend(v, "numpy", case.layout_of("v"))
        mb = None if mask is None else aux(mask.numpy(), case)  # numpy backend: arrays throughout
    bias = bias64 = None
    if case.bias == "alibi":
        from harness.case.positional import alibi_bias

        bias64 = alibi_bias(h, tq, tk).to(dtype).to(torch.float64)
        bias = aux(bias64.to(dtype).to(device) if backend == "torch" else bias64.numpy().astype(case.dtype), case, "bias")
    inputs = Inputs(qb, kb, vb, mb, q64, k64, v64, mask, bias, bias64)
    for part in case.structure_parts:  # drawn last: every other case's inputs stay as they were
        part.draw(inputs, case, k, v, gen, backend)
    if case.sinks:  # after everything else, for the same reason
        sinks = torch.randn(h, generator=gen, dtype=torch.float64).to(dtype)
        inputs.sinks64 = sinks.to(torch.float64)
        inputs.sinks = sinks.to(device) if backend == "torch" else sinks.numpy().astype(case.dtype)
    return inputs
