"""An FP8 KV cache for a case: the drawn K and V quantised with float32 scales, and read back in float64.

A case with an FP8 ``kv_dtype`` (:mod:`harness.case.quantized`) is drawn as every case is, then each of K and V is
quantised as a serving engine writes its cache: per group of the scale layout (the whole tensor, a kv head, a
token of a kv head) the scale is the group's largest magnitude over the type's largest value, and the stored
value is ``x / scale`` rounded to FP8 (saturating, for given scales that a value exceeds). The oracle and the
rule's baseline then read ``stored * scale`` in float64 (exact: 4 significant bits times 24), so the rule judges
the kernel on the question it was asked, not the quantisation; the unquantised values are kept beside them for
the one check that measures the quantisation's own error (:mod:`harness.verify.quantisation`).

The magnitudes of K and V are first spread over the groups by factors of 2^u, u in [-1.5, 1.5]: per kv head for
``head`` scales (evenly spaced over the heads, in a random order, so no two heads are alike), per token and kv head
for ``token`` scales (uniform). Real caches differ in size from head to head and token to token, which is why those
layouts exist, and scales that differ by up to 8x make a scale read from the wrong group, or not at all, wrong by
far more than any rounding.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from harness.case.dtypes import FP8_TABLE
from harness.case.quantized import largest, scale_shape

SPREAD_OCTAVES = 1.5
"""Group magnitudes are spread by 2^u, u uniform in [-SPREAD_OCTAVES, SPREAD_OCTAVES]."""
FP8_TORCH: dict[str, torch.dtype] = {name: getattr(torch, name) for name in FP8_TABLE}
CLIP_SLACK = 2.0 ** -16
"""A value counts as saturated when ``x / scale`` passes the largest FP8 value by more than this share: the division's
own rounding (2^-24 in float32) puts a group's largest value a hair past it, and that one rounds to it anyway."""


def factor(scale: torch.Tensor, layout: str) -> torch.Tensor:
    """``scale`` in float64, shaped to multiply a cache (B, Hkv, T, d), or page pools (P, Hkv, page, d) with
    per-token scales (P, Hkv, page): (1, Hkv or 1, 1, 1) for tensor and head scales, (..., T, 1) for token ones."""
    s = scale.to(torch.float64)
    return s.reshape(1, -1, 1, 1) if layout in ("tensor", "head") else s[..., None]


def dequantize(stored: torch.Tensor, scale: torch.Tensor, layout: str) -> torch.Tensor:
    """``stored * scale`` in float64 (exact), after checking the scale's shape against the layout and its values:
    a ``ValueError`` naming what is wrong and the shape wanted, never a silently broadcast answer."""
    b, hkv, t = stored.shape[:3]
    want = scale_shape(layout, b, hkv, t)
    if tuple(scale.shape) != want:
        raise ValueError(f"a {layout} scale of shape {tuple(scale.shape)} for a cache of shape {tuple(stored.shape)}: "
                         f"expected {want}")
    s = scale.detach().to("cpu", torch.float64)
    if not bool((torch.isfinite(s) & (s > 0)).all()):
        raise ValueError(f"a {layout} scale holds {float(s[~(torch.isfinite(s) & (s > 0))][0])}: every scale must be "
                         "a finite number > 0")
    return stored.to(torch.float64) * factor(scale, layout).to(stored.device)


@dataclass
class Quantized:
    """One of K and V in FP8: what an implementation receives and what the oracle reads."""

    stored: torch.Tensor
    """(B, Hkv, Tk, d) in the FP8 type, contiguous."""
    scale: torch.Tensor
    """float32, of the layout's shape (:func:`harness.case.quantized.scale_shape`)."""
    exact: torch.Tensor | None
    """The values before quantisation (the draw's dtype, float32 or float64): the unquantised cache (None where the
    caller keeps no float64 copies, as bench)."""
    clipped: int
    """Values past the FP8 range that saturated (only given scales let one)."""


@dataclass
class QuantizedCache:
    """A case's K and V quantised (:func:`quantize_cache`), with the layout their scales have."""

    layout: str
    k: Quantized
    v: Quantized

    def dequantized(self) -> tuple[torch.Tensor, torch.Tensor]:
        """K and V as ``stored * scale`` in float64."""
        return (self.k.stored.to(torch.float64) * factor(self.k.scale, self.layout),
                self.v.stored.to(torch.float64) * factor(self.v.scale, self.layout))

    def paged(self, k_pages: torch.Tensor, v_pages: torch.Tensor, table: torch.Tensor, tk: int,
              generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """The oracle's K and V read from the page pools through ``table`` and dequantized, and the scale pools a
        paged kernel receives (None unless per-token: tensor and head scales do not depend on where a key lives).
        A per-token scale lives where its key does, (num_pages, Hkv, page_size); the slots no sequence uses hold
        draws of their own, like the pools' unused keys."""
        from harness.case.paging import gather_pages, page_rows

        if self.layout != "token":
            return (gather_pages(k_pages.to(torch.float64), table, tk) * factor(self.k.scale, self.layout),
                    gather_pages(v_pages.to(torch.float64), table, tk) * factor(self.v.scale, self.layout), None, None)
        pools = []
        for x in (self.k, self.v):
            filler = x.scale.new_empty(k_pages.shape[:3]).uniform_(0.5, 2.0, generator=generator) * x.scale.mean()
            pools.append(page_rows(x.scale, table, filler))
        k64 = gather_pages(k_pages.to(torch.float64) * factor(pools[0], "token"), table, tk)
        v64 = gather_pages(v_pages.to(torch.float64) * factor(pools[1], "token"), table, tk)
        return k64, v64, pools[0], pools[1]


def _spread(x: torch.Tensor, layout: str, generator: torch.Generator) -> torch.Tensor:
    """``x`` with each scale group's magnitude multiplied by 2^u (module docstring); unchanged for tensor scales."""
    b, hkv, t, _ = x.shape
    if layout == "tensor":
        return x
    if layout == "head":  # evenly spaced, in a random order: no two kv heads alike however few they are
        steps = torch.linspace(-SPREAD_OCTAVES, SPREAD_OCTAVES, hkv, dtype=torch.float64) if hkv > 1 \
            else torch.zeros(1, dtype=torch.float64)
        u = steps[torch.randperm(hkv, generator=generator)].reshape(1, hkv, 1, 1)
    else:
        u = torch.rand(b, hkv, t, 1, generator=generator, dtype=torch.float64) * (2 * SPREAD_OCTAVES) - SPREAD_OCTAVES
    return x * torch.exp2(u).to(x.dtype)


def _quantize(x: torch.Tensor, kv_dtype: str, layout: str, given: tuple[float, ...] | None) -> Quantized:
    """``x`` (B, Hkv, T, d) stored in ``kv_dtype`` with scales of ``layout``: the ``given`` ones, else each group's
    largest magnitude over the type's largest value (a group of zeros gets scale 1)."""
    top = largest(kv_dtype)
    b, hkv, t, _ = x.shape
    if given is not None:
        scale = torch.tensor(given, dtype=torch.float32).reshape(scale_shape(layout, b, hkv, t))
    else:
        dims = {"tensor": (0, 1, 2, 3), "head": (0, 2, 3), "token": (3,)}[layout]
        amax = x.abs().amax(dim=dims).to(torch.float32).reshape(scale_shape(layout, b, hkv, t))
        scale = torch.where(amax > 0, amax / top, torch.ones_like(amax))
    ratio = x / factor(scale, layout).to(x.dtype)
    clipped = int((ratio.abs() > top * (1 + CLIP_SLACK)).sum())  # a computed scale's largest value: 448 within rounding
    stored = ratio.clamp(-top, top).to(FP8_TORCH[kv_dtype])
    return Quantized(stored, scale, x, clipped)


def quantize_cache(case: Any, k: torch.Tensor, v: torch.Tensor, generator: torch.Generator) -> QuantizedCache:
    """The case's drawn K and V (B, Hkv, Tk, d) spread over the scale groups and quantised (module docstring); the
    generator is read for the spread, K's then V's."""
    given = case.kv_scale_values or (None, None)
    k, v = _spread(k, case.kv_scales, generator), _spread(v, case.kv_scales, generator)
    return QuantizedCache(case.kv_scales, _quantize(k, case.kv_dtype, case.kv_scales, given[0]),
                          _quantize(v, case.kv_dtype, case.kv_scales, given[1]))
