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

from harness.cases import AttentionCase

MODES = ("fwd", "bwd", "fwd+bwd")
BWD_OVER_FWD = 2.5


def attended_pairs(tq: int, tk: int, causal: bool, window: tuple[int, int] | None = None,
                   causal_align: str = "top_left") -> int:
    """Query/key pairs that take part: all of them, the lower triangle (top-left aligned), or those
    causality and a window ``(left, right)`` leave under ``causal_align`` (see :mod:`harness.oracle`)."""
    if window is None and causal_align == "top_left":
        if not causal:
            return tq * tk
        # row i sees keys 0..i (capped at tk)
        full = min(tq, tk)
        return full * (full + 1) // 2 + max(tq - tk, 0) * tk
    offset = tk - tq if causal_align == "bottom_right" else 0
    total = 0
    for i in range(offset, tq + offset):  # row i - offset sees keys lo..hi-1
        lo = 0 if window is None else max(0, i - window[0])
        hi = tk if not causal else min(tk, i + 1)
        if window is not None:
            hi = min(hi, i + window[1] + 1)
        total += max(0, hi - lo)
    return total


def case_pairs(case: AttentionCase) -> int:
    """The attended pairs of one (batch element, head) of ``case``; packed sequences: the sum over them;
    ragged KV-cache lengths: the mean over batch elements (:func:`batch_pairs` is exact)."""
    if case.cache_seqlens is not None:
        return batch_pairs(case) // case.batch
    if case.varlen is not None:
        return sum(attended_pairs(a, b, case.causal, case.window, case.causal_align) for a, b in case.varlen)
    return attended_pairs(case.tq, case.tk, case.causal, case.window, case.causal_align)


def batch_pairs(case: AttentionCase) -> int:
    """The attended pairs of one head summed over the batch (each element of a KV cache under its own length)."""
    if case.cache_seqlens is not None:
        return sum(attended_pairs(case.tq, n, case.causal, case.window, case.causal_align) for n in case.cache_seqlens)
    return case.batch * case_pairs(case)


def forward_flops(case: AttentionCase) -> int:
    """4 * B * H * (attended pairs) * d."""
    return 4 * case.heads * batch_pairs(case) * case.d


def compulsory_bytes(case: AttentionCase, mode: str = "fwd") -> int:
    """Bytes a call must move at least: Q, K and V read once, O written once (only the cached keys some
    query may attend: a ragged cache's valid keys, a window's); a backward pass reads Q, K, V, O, dO and
    writes dQ, dK, dV. K and V count in the KV cache's dtype when the case has one (``kv_dtype``).
    The denominator of a cell's GB/s and the roofline's arithmetic intensity."""
    from harness.decode import compulsory_keys

    sizes = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2}
    item = sizes[case.dtype]
    kv_item = sizes[getattr(case, "kv_dtype", None) or case.dtype]  # a KV cache in its own dtype: its bytes
    keys = case.batch * case.tk if case.varlen is not None else compulsory_keys(case)
    q = case.batch * case.heads * case.tq * case.d
    kv = 2 * case.kv_heads * keys * case.d
    fwd = 2 * q * item + kv * kv_item
    if mode == "fwd":
        return fwd
    bwd = (4 * q + 2 * kv) * item  # Q, K, V, O, dO read; dQ, dK, dV written
    return bwd + (fwd if mode == "fwd+bwd" else 0)


def attention_flops(case: AttentionCase, mode: str = "fwd") -> float:
    """FLOPs of one call in ``mode`` (fwd, bwd = 2.5x fwd, fwd+bwd = 3.5x fwd)."""
    fwd = forward_flops(case)
    if mode == "fwd":
        return float(fwd)
    if mode == "bwd":
        return BWD_OVER_FWD * fwd
    if mode == "fwd+bwd":
        return (1.0 + BWD_OVER_FWD) * fwd
    raise ValueError(f"unknown mode {mode!r}; choose one of {MODES}")


def work_g(case: AttentionCase) -> int:
    """g = B * H * Tq * Tk * d: the complexity term the scaling fit uses (masking ignored); with a
    sliding window or packed sequences, B * H * (attended pairs) * d (a window's grow as T, not T^2)."""
    if case.window is not None or case.varlen is not None or case.cache_seqlens is not None:
        return case.heads * batch_pairs(case) * case.d
    return case.batch * case.heads * case.tq * case.tk * case.d
