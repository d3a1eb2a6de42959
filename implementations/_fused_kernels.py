"""tiled_fused's compiled kernels: the build, the CPU-feature check, and the work items of the forward
and backward (:mod:`implementations.tiled_fused` is the plugin and its autograd wrapper).

Structure (causal in either alignment, a sliding window, packed sequences) reaches the C++ as a *band*
per packed sequence (:file:`_flash_band.h`): the sequence's keys ``[kmin, kmax)`` and the shift aligning
its rows with them, so row i may see the contiguous key range ``[lo(i), hi(i))``. A forward work item
is one query block of one sequence and head, and visits only the key blocks its rows may see; a
backward item is one key block of one sequence and kv head, and visits only the query rows that see it.
The work is O(T * window) under a window and the sum of the sequences' own under packing; nothing is
O(T^2) unless the structure is, and memory stays O(T).

It is one module: the forward and the backward share the extension it loads, the
tier it picks per dtype and ISA, and the band of each sequence, and each reads as the mirror of the other.
"""

from __future__ import annotations

import math
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from harness.errors import UsageError
from implementations._cpp_build import ISAS, KERNELS, baseline, build, built_before, extension_name, missing
from implementations._flash_cpu import LOG2E
from implementations._workers import run_parallel

SOURCES = [KERNELS / name for name in ("_flash_fused.cpp", "_flash_backward.cpp", "_flash_avx2.cpp",
                                       "_flash_avx2_backward.cpp")]
"""The float32/float64 kernels, compiled at the CPU's :func:`baseline` level: generic (MKL's GEMMs) always,
avx2 where that level is AVX2 (compiled out where it is not). tiled_fused is available when these build."""
AVX512_SOURCES = [KERNELS / "_flash_f32.cpp"]
"""The avx512f tier's float32 forward with its own GEMMs, an extension compiled for AVX-512F."""
BF16_SOURCES = [KERNELS / name for name in ("_flash_bf16.cpp", "_flash_bf16_backward.cpp")]
"""The avx512_bf16 tier's kernels, an extension compiled for AVX512_BF16: if the compiler cannot build it,
only this fast path is lost (bf16 takes the float32 kernels) and :func:`bf16_reason` says why."""
FORCE_ISA = "ATTNBENCH_FUSED_ISA"
"""Environment variable capping the tier (one of :data:`TIERS`), to run a lower tier's kernels on a
CPU that has a higher one; unset or empty: the best the CPU and the builds allow."""
TIERS = ("generic", "avx2", "avx512f", "avx512_bf16", "amx_bf16")
"""Kernel tiers, lowest first: generic (MKL's GEMMs, scalar or AVX2 softmax), avx2 (AVX2 + FMA tile
GEMMs of their own; bf16 converted to float32 as it loads), avx512f (the same forward on AVX-512),
avx512_bf16 (bf16 on VDPBF16PS), amx_bf16 (the bf16 forward's and backward's tile GEMMs on oneDNN's brgemm,
AMX tiles, where oneDNN runs bf16 on them)."""
_BUILD_LOCK = threading.Lock()
_BUILD: dict[str, ModuleType | str] = {}
DIAGONAL_CHUNK = 64
"""Rows per GEMM where a block crosses an edge of the band (the causal diagonal, a window's edge), each
against the keys its rows may see. M = 64 GEMMs run at ~90% of MKL's 256-row speed; 32, 64, 128 within
1%, no chunks 5% slower."""

Sequence = tuple[int, int, int, int, list[int]]
"""(first query, end of queries, first key, end of keys, band): one packed sequence (the whole
tensor when unpacked); the band is ``[causal, kmin, kmax, shift, left, right]`` (-1: unbounded)."""


def _built(level: str, prefix: str, sources: list[Path]) -> ModuleType | str:
    """The extension of ``sources`` compiled whole for ``level`` (the baseline's for "baseline"), or why
    it is not there: the CPU lacks the level's features (then it is neither built nor loaded) or the build
    failed. Tried once per process."""
    with _BUILD_LOCK:
        if level not in _BUILD:
            isa = baseline() if level == "baseline" else ISAS[level]
            openmp = ["-fopenmp"]  # the forward's items run on torch's OpenMP team (_flash_items.h)
            name = extension_name(prefix, isa.name, sources, openmp)
            reason = missing(isa)
            if reason is not None:
                _BUILD[level] = reason
            else:
                if not built_before(name):  # a silent minute would look like a hang
                    print(f"attnbench: building tiled_fused's {isa.name} C++ kernels (first use only, about a minute)",
                          file=sys.stderr)
                _BUILD[level] = build(sources, name, [*isa.flags, *openmp], ldflags=openmp)
        return _BUILD[level]


def extension() -> ModuleType | str:
    """The float32/float64 kernels' module (generic and avx2), or the reason it could not be built."""
    return _built("baseline", "attnbench_flash_fused", SOURCES)


def avx512_extension() -> ModuleType | str:
    """The avx512f tier's module, or the reason it is not there (this CPU, or the build)."""
    return _built("avx512f", "attnbench_flash_avx512", AVX512_SOURCES)


def bf16_extension() -> ModuleType | str:
    """The avx512_bf16 tier's module, or the reason it is not there (this CPU, or the build)."""
    return _built("avx512_bf16", "attnbench_flash_bf16", BF16_SOURCES)


def _extension_of(tier_name: str) -> ModuleType | str:
    """The module holding the kernels of tier ``tier_name`` (generic and avx2: the baseline extension)."""
    return {"avx512f": avx512_extension, "avx512_bf16": bf16_extension, "amx_bf16": bf16_extension}.get(
        tier_name, extension)()


def available(case: object = None) -> str | None:
    """None once the float32 kernels are built (or loaded from torch's cache), else the build's error (the same
    for every ``case``).
    Builds the AVX-512 kernels this CPU runs too, so that no case's time limit ever times a build; their
    failure is not this one's (:func:`bf16_reason`, :func:`f32_reason`)."""
    result = extension()
    avx512_extension()
    bf16_extension()
    return result if isinstance(result, str) else None


def _cap(isa: str | None) -> int:
    """The highest tier allowed: ``isa``, else the environment variable, else the best (any CPU)."""
    isa = isa or os.environ.get(FORCE_ISA, "")
    if isa and isa not in TIERS:
        raise UsageError(f"tiled_fused: isa={isa!r}; one of {', '.join(TIERS)}")
    return TIERS.index(isa) if isa else len(TIERS) - 1


def _tier_reason(isa: str | None, want: str) -> str | None:
    """Why the kernels of tier ``want`` do not run (None when they do): ``isa`` (or the environment
    variable) caps the tier lower, the CPU lacks the tier's features (:data:`ISAS`; avx2: the baseline
    extension is compiled for it only where the CPU has them), or the extension holding them did not build."""
    if _cap(isa) < TIERS.index(want):
        return f"the {want} kernels are not used: isa or {FORCE_ISA} asks for {TIERS[_cap(isa)]}"
    if want == "generic":
        return None
    reason = missing(ISAS["avx512_bf16" if want == "amx_bf16" else want])
    if reason is not None:
        return reason
    ext = _extension_of(want)
    if isinstance(ext, str):
        return f"the {want} kernels did not build ({ext})"
    if want == "amx_bf16" and not ext.amx_ready():
        return "oneDNN's brgemm runs no bfloat16 on AMX tiles here (cpublas::could_pack(bfloat16) is false)"
    return None


def f32_tier(isa: str | None = None) -> str:
    """The tier whose kernels run float32 input (and bf16 without the bf16 units): avx512f, avx2 (tile
    GEMMs of their own) or generic (MKL's GEMMs)."""
    return next(t for t in ("avx512f", "avx2", "generic") if _tier_reason(isa, t) is None)


def tier(dtype: torch.dtype, isa: str | None = None) -> str:
    """The tier whose kernels run ``dtype`` input (float16 and float64: the float32/float64 generic path)."""
    if dtype == torch.bfloat16:
        for level in ("amx_bf16", "avx512_bf16"):
            if _tier_reason(isa, level) is None:
                return level
    return f32_tier(isa) if dtype in (torch.float32, torch.bfloat16) else "generic"


def bf16_reason(isa: str | None = None) -> str | None:
    """Why bfloat16 input does not run on the bf16 dot-product units (None when it does); it then runs
    on :func:`f32_tier`'s kernels, converted to float32 as they load it."""
    reason = _tier_reason(isa, "avx512_bf16")
    return None if reason is None else f"bf16 runs on the {f32_tier(isa)} float32 kernels: {reason}"


def f32_reason(isa: str | None = None) -> str | None:
    """Why the float32 forward does not run on its AVX-512 kernel with its own GEMMs (None when it does)."""
    reason = _tier_reason(isa, "avx512f")
    return None if reason is None else f"float32 takes the {f32_tier(isa)} path: {reason}"


def bf16_kernel(isa: str | None = None) -> bool:
    """Whether bfloat16 input runs on the bf16 dot-product units (see :func:`bf16_reason`)."""
    return bf16_reason(isa) is None


def sequences(tq: int, tk: int, causal: bool, window: tuple[int, int] | None, causal_align: str,
              cu_q: list[int] | None, cu_k: list[int] | None) -> list[Sequence]:
    """The packed sequences (one when unpacked), each with its band."""
    spans = [(0, tq, 0, tk)] if cu_q is None or cu_k is None else list(zip(cu_q, cu_q[1:], cu_k, cu_k[1:]))
    left, right = window if window is not None else (-1, -1)
    out = []
    for q0, q1, k0, k1 in spans:
        offset = (k1 - k0) - (q1 - q0) if causal_align == "bottom_right" else 0
        out.append((q0, q1, k0, k1, [int(causal), k0, k1, k0 - q0 + offset, left, right]))
    return out


def _keys(band: list[int], q0: int, q1: int) -> int:
    """How many keys rows q0:q1 may see at most (the work of a forward item, for ordering)."""
    causal, kmin, kmax, shift, left, right = band
    lo = kmin if left < 0 else max(kmin, q0 + shift - left)
    hi = kmax if not causal else min(kmax, q1 - 1 + shift + 1)
    hi = hi if right < 0 else min(hi, q1 - 1 + shift + right + 1)
    return max(0, hi - lo)


def _uint8(mask: torch.Tensor | None, b: int, h: int, tq: int, tk: int) -> torch.Tensor | None:
    return None if mask is None else mask.to(torch.bool).expand(b, h, tq, tk).view(torch.uint8)


def _gaps(spans: list[tuple[int, int]], end: int) -> list[tuple[int, int]]:
    """The ranges of [0, end) that no span [a, b) covers."""
    gaps, start = [], 0
    for a, b in [*sorted(spans), (end, end)]:
        if a > start:
            gaps.append((start, a))
        start = max(start, b)
    return gaps


def _clear_uncovered(out: torch.Tensor, lse: torch.Tensor, seqs: list[Sequence]) -> None:
    """Zero output and -inf LSE on the query rows outside every sequence; the work items write all others.

    Why not ``torch.zeros``: a fill of the whole output is an OpenMP region, whose threads then spin on
    the cores the kernel's workers are about to use (measured: 7% of a bf16 forward at T = 4,096)."""
    for a, b in _gaps([(qs, qe) for qs, qe, _, _, _ in seqs], out.shape[2]):
        out[:, :, a:b].zero_()
        lse[:, :, a:b] = -math.inf


def forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, seqs: list[Sequence],
            scale: float, block_q: int, block_k: int, isa: str | None = None,
            diagonal_chunk: int = DIAGONAL_CHUNK, softcap: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Output (B, H, Tq, d) and natural-log LSE (B, H, Tq): bf16 output and float32 LSE from the bf16
    kernel, else both in float32 (float64 for float64 input). Rows no key reaches: zero, LSE -inf.
    ``softcap``: the scaled logits become ``softcap * tanh(logit / softcap)`` before any mask, in every tier."""
    ext = extension()
    if isinstance(ext, str):
        raise RuntimeError(ext)
    b, h, tq, d = q.shape
    m = _uint8(mask, b, h, tq, k.shape[2])
    blocks = [(q0, min(q0 + block_q, qe), band) for qs, qe, _, _, band in seqs for q0 in range(qs, qe, block_q)]
    blocks.sort(key=lambda blk: -_keys(blk[2], blk[0], blk[1]))  # the longest items first: workers finish together
    items = [(bi, hi, q0, q1, band) for q0, q1, band in blocks for bi in range(b) for hi in range(h)]
    # Kernels with their own GEMMs where the tier has them (bf16 on the bf16 units, or converted to
    # float32 as it loads); else MKL's GEMMs (float32, float64: bf16 and float16 converted whole).
    level = tier(q.dtype, isa)
    own = {"amx_bf16": "forward_items_amx", "avx512_bf16": "forward_items_bf16", "avx512f": "forward_items_f32",
           "avx2": "forward_items_avx2"}.get(level)
    if own is not None:
        dtype = torch.bfloat16 if q.dtype == torch.bfloat16 else torch.float32
        lse_dtype = torch.float32
    else:
        dtype = lse_dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
    q2, k2, v2 = q.to(dtype), k.to(dtype), v.to(dtype)  # views for input already in dtype, any strides
    out = torch.empty(b, h, tq, d, dtype=dtype)
    lse = torch.empty(b, h, tq, dtype=lse_dtype)
    _clear_uncovered(out, lse, seqs)
    if own is not None:
        every_item = getattr(_extension_of(level), own)
        q2, k2, v2 = (x if x.stride(-1) == 1 else x.contiguous() for x in (q2, k2, v2))
        every_item(q2, k2, v2, m, out, lse, items, scale * LOG2E, block_k, diagonal_chunk, softcap or 0.0)
        return out, lse

    def one(item: tuple[int, int, int, int, list[int]], cache: dict) -> None:
        ext.forward_item(q2, k2, v2, m, out, lse, *item, scale * LOG2E, block_k, diagonal_chunk, softcap or 0.0)

    run_parallel(items, one)
    return out, lse


def backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, lse: torch.Tensor,
             dout: torch.Tensor, mask: torch.Tensor | None, seqs: list[Sequence], scale: float, block_q: int,
             block_k: int, isa: str | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dQ, dK, dV in float32: work items are key blocks of one sequence and kv head (dK, dV private to
    the item); dQ accumulates in one buffer per worker, summed at the end."""
    ext = extension()
    assert not isinstance(ext, str)  # the forward ran
    b, h, tq, d = q.shape
    hk, tk = k.shape[1], k.shape[2]
    lse2 = torch.where(lse == -math.inf, math.inf, lse.float() * LOG2E).contiguous()  # empty rows: P = 0
    delta = (dout.float() * out.float()).sum(-1).contiguous()  # D_i = rowsum(dO * O)
    m = _uint8(mask, b, h, tq, tk)
    level, kernel = _backward_kernel(ext, q, k, v, dout, isa)
    block_q, block_k = _backward_tiles(level, block_q, block_k)
    # The kernels with their own GEMMs read q, k, v, dO in their dtype (float32, or bf16 converted as
    # they load it); MKL's (generic) need float32 copies.
    own = level != "generic"
    q2, k2, v2, do2 = ((x if x.stride(-1) == 1 else x.contiguous()) if own else x.float() for x in (q, k, v, dout))
    # dK and dV uninitialised: each item zeroes its own key block on its worker (see _clear_uncovered).
    dk = torch.empty(b, hk, tk, d)
    dv = torch.empty(b, hk, tk, d)
    spans = [(qs, qe, ks, ke, band) for qs, qe, ks, ke, band in seqs if qe > qs]  # sequences with queries
    items = [(bi, hi, k0, min(k0 + block_k, ke), qs, qe, band) for qs, qe, ks, ke, band in spans
             for k0 in range(ks, ke, block_k) for bi in range(b) for hi in range(hk)]
    for a, e in _gaps([(ks, ke) for _, _, ks, ke, _ in spans], tk):  # keys no item owns: zero
        dk[:, :, a:e].zero_()
        dv[:, :, a:e].zero_()

    def one(item: tuple[int, int, int, int, int, int, list[int]], cache: dict) -> None:
        if "dq" not in cache:
            cache["dq"] = torch.zeros(b, h, tq, d)
        dk[item[0], item[1], item[2]:item[3]].zero_()
        dv[item[0], item[1], item[2]:item[3]].zero_()
        kernel(q2, k2, v2, do2, lse2, delta, m, cache["dq"], dk, dv, *item, scale * LOG2E, scale, block_q)

    dqs = [cache["dq"] for cache in run_parallel(items, one) if "dq" in cache] or [torch.zeros(b, h, tq, d)]
    for other in dqs[1:]:
        dqs[0].add_(other)
    return dqs[0], dk, dv


def _backward_kernel(ext: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dout: torch.Tensor,
                     isa: str | None) -> tuple[str, Callable[..., None]]:
    """The backward's tier and its per-item kernel: the tier's own where it has one, else MKL's ("generic",
    also for inputs of mixed dtypes)."""
    level = tier(q.dtype, isa) if len({x.dtype for x in (q, k, v, dout)}) == 1 else "generic"
    if level == "avx512f":  # no AVX-512 backward of its own for float32: the AVX2 one (same instructions, 8 lanes)
        level = "avx2" if _tier_reason(isa, "avx2") is None else "generic"
    kernels = {"amx_bf16": getattr(bf16_extension(), "backward_item_amx", None),
               "avx512_bf16": getattr(bf16_extension(), "backward_item_bf16", None),
               "avx2": getattr(ext, "backward_item_avx2", None)}
    kernel: Callable[..., None] = kernels.get(level) or ext.backward_item
    return level, kernel


def _backward_tiles(level: str, block_q: int, block_k: int) -> tuple[int, int]:
    """The backward's (query, key) tile for its tier, no larger than the one asked.

    Tiles with two float32 score blocks (P, dS) to keep in L2: at T = 4096, float32 256 x 256 and
    bf16 128 x 512 were 5-15% faster than the forward's 512 x 512 (noisy; within 5% at d = 64 bf16).
    The AVX2 kernel's GEMMs take rows six at a time (its 6 x 16 register block): 120 query rows, not 128
    (21 blocks and 2 rows left over), made its backward 5-10% faster at B1-H8-T4096, d = 64 and 128."""
    if level == "generic":
        return min(block_q, 256), min(block_k, 256)
    rows = 120 if level == "avx2" else 128
    return min(block_q, rows), block_k if level in ("avx512_bf16", "amx_bf16") else min(block_k, 256)
