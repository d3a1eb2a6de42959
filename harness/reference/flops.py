"""Work done by one attention call, in floating-point operations, for GFLOP/s and % of peak.

Forward: two matmuls, ``Q K^T`` and ``P V``, each ``2 * Tq * Tk * d`` multiply-adds per
head, so ``4 * B * H * Tq * Tk * d``; softmax and scaling are O(T^2) and left out, as
FlashAttention's papers and benchmarks do. With causal masking only the unmasked
query/key pairs count (``sum_i min(i + 1, Tk)`` of them), so a causal kernel that skips
masked blocks is not credited with work it did not need to do; the same holds for the
structures of a case (bottom-right causal alignment, sliding windows): only the pairs they
allow count, whether the kernel takes them natively or gets them as a dense mask. Other
masks count in full: a dense kernel does that work regardless. Backward: 2.5x the forward (five
matmuls of the same size instead of two), the usual convention.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from harness.case.attention import AttentionCase
from harness.case.decode import compulsory_keys
from harness.case.dtypes import itemsize
from harness.case.quantized import is_fp8, scale_count

MODES = ("fwd", "bwd", "fwd+bwd")
BWD_OVER_FWD = 2.5


def attended_pairs(tq: int, tk: int, causal: bool, window: tuple[int, int] | None = None,
                   causal_align: str = "top_left", key_ranges: Sequence[Any] = ()) -> int:
    """Query/key pairs that take part: all of them, the lower triangle (top-left aligned), or those
    causality, a window ``(left, right)`` and ``key_ranges`` (structures bounding each query's keys,
    :meth:`harness.case.structures.Structure.key_range`) leave under ``causal_align`` (see :mod:`harness.reference.oracle`)."""
    if window is None and causal_align == "top_left" and not key_ranges:
        if not causal:
            return tq * tk
        # row i sees keys 0..i (capped at tk)
        full = min(tq, tk)
        return full * (full + 1) // 2 + max(tq - tk, 0) * tk
    offset = tk - tq if causal_align == "bottom_right" else 0
    i = np.arange(tq, dtype=np.int64)  # query i sees keys lo..hi-1 (j = j' + offset)
    lo, hi = np.zeros(tq, dtype=np.int64), np.full(tq, tk, dtype=np.int64)
    if causal:
        hi = np.minimum(hi, i + offset + 1)
    if window is not None:
        lo, hi = np.maximum(lo, i + offset - window[0]), np.minimum(hi, i + offset + window[1] + 1)
    for structure in key_ranges:
        first, end = structure.key_range(i)
        lo, hi = np.maximum(lo, np.asarray(first) + offset), np.minimum(hi, np.asarray(end) + offset)
    return int(np.maximum(hi - lo, 0).sum())


def segments(case: AttentionCase) -> list[tuple[int, int]]:
    """The (query length, key length) blocks attention runs inside, over the batch: one (Tq, Tk) per batch
    element, unless a structure cuts the call otherwise (packed sequences, ragged cache lengths)."""
    cut = (part.segments(case) for part in case.structure_parts)
    return list(next((s for s in cut if s is not None), [(case.tq, case.tk)] * case.batch))


def batch_pairs(case: AttentionCase) -> int:
    """The attended pairs of one head summed over the batch (each block of :func:`segments` on its own)."""
    where = case.structure_kwargs()
    window, align, ranges = where.get("window"), where.get("causal_align", "top_left"), where.get("key_ranges", ())
    return sum(count * attended_pairs(lq, lk, case.causal, window, align, ranges)
               for (lq, lk), count in Counter(segments(case)).items())


def forward_flops(case: AttentionCase) -> int:
    """2 * B * H * (attended pairs) * (d + dv): ``Q K^T`` over q/k's head dim, ``P V`` over V's (4 * ... * d
    when they are equal). Soft-capping's tanh and a sink's one extra logit per row are O(T^2) and O(T), like
    the softmax, and left out."""
    return 2 * case.heads * batch_pairs(case) * (case.d + _value_dim(case))


def _value_dim(case: AttentionCase) -> int:
    return int(getattr(case, "dv", 0) or case.d)


def compulsory_bytes(case: AttentionCase, mode: str = "fwd") -> int:
    """Bytes a call must move at least: Q, K and V read once, O written once (only the cached keys some
    query may attend: a ragged cache's valid keys, a window's); a backward pass reads Q, K, V, O, dO and
    writes dQ, dK, dV; V, O and dO count with V's head dim (``dv``), sinks once. K and V count in the KV
    cache's dtype when the case has one (``kv_dtype``); an FP8 cache adds its float32 scales (one each for K and V
    per tensor, per kv head, or per key read and kv head: :func:`harness.case.quantized.scale_count`).
    The denominator of a cell's GB/s and the roofline's arithmetic intensity."""
    item = itemsize(case.dtype)
    if hasattr(case, "own_bytes"):  # a module case: its projections' weights and cache beside X and Y
        return int(case.own_bytes(mode, item))
    kv_item = itemsize(getattr(case, "kv_dtype", None) or case.dtype)  # a KV cache in its own dtype: its bytes
    reads = (part.key_reads(case) for part in case.structure_parts)
    keys = next((n for n in reads if n is not None), None)
    keys = compulsory_keys(case) if keys is None else keys
    q = case.batch * case.heads * case.tq * case.d
    o = case.batch * case.heads * case.tq * _value_dim(case)  # O and dO have V's head dim
    kv = case.kv_heads * keys * (case.d + _value_dim(case))
    sinks = case.heads * item if getattr(case, "sinks", False) else 0  # one logit per head, read once
    scales = 2 * 4 * scale_count(case, keys) if is_fp8(case) else 0  # K's and V's float32 scales, read once
    fwd = (q + o) * item + kv * kv_item + sinks + scales
    if mode == "fwd":
        return fwd
    bwd = (2 * q + 2 * o + 2 * kv) * item + 2 * sinks  # Q, K, V, O, dO (and sinks) read; dQ, dK, dV (d sinks) written
    return bwd + (fwd if mode == "fwd+bwd" else 0)


def attention_flops(case: AttentionCase, mode: str = "fwd") -> float:
    """FLOPs of one call in ``mode`` (fwd, bwd = 2.5x fwd, fwd+bwd = 3.5x fwd); a module case counts its own
    (projections and attention: :meth:`harness.modules.ModuleCase.own_flops`)."""
    if hasattr(case, "own_flops"):
        return float(case.own_flops(mode))
    fwd = forward_flops(case)
    if mode == "fwd":
        return float(fwd)
    if mode == "bwd":
        return BWD_OVER_FWD * fwd
    if mode == "fwd+bwd":
        return (1.0 + BWD_OVER_FWD) * fwd
    raise ValueError(f"unknown mode {mode!r}; choose one of {MODES}")


def work_g(case: AttentionCase) -> int:
    """g = B * H * Tq * Tk * d: the complexity term the scaling fit uses (masking ignored); with a sparse
    structure (a sliding window, packed sequences, cache lengths), B * H * (attended pairs) * d (a window's grow
    as T, not T^2)."""
    if hasattr(case, "own_work"):  # a module case
        return int(case.own_work())
    if any(part.sparse for part in case.structure_parts):
        return case.heads * batch_pairs(case) * (case.d + _value_dim(case)) // 2
    return case.batch * case.heads * case.tq * case.tk * (case.d + _value_dim(case)) // 2
