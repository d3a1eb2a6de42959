"""Work done by one attention call, in floating-point operations, for GFLOP/s and % of peak.

Forward: two matmuls, ``Q K^T`` and ``P V``, each ``2 * Tq * Tk * d`` multiply-adds per
head, so ``4 * B * H * Tq * Tk * d``; softmax and scaling are O(T^2) and left out, as
FlashAttention's papers and benchmarks do. With causal masking only the unmasked
query/key pairs count (``sum_i min(i + 1, Tk)`` of them), so a causal kernel that skips
masked blocks is not credited with work it did not need to do. Other masks count in
full: a dense kernel does that work regardless. Backward: 2.5x the forward (five
matmuls of the same size instead of two), the usual convention.
"""

from __future__ import annotations

from harness.cases import AttentionCase

MODES = ("fwd", "bwd", "fwd+bwd")
BWD_OVER_FWD = 2.5


def attended_pairs(tq: int, tk: int, causal: bool) -> int:
    """Query/key pairs that take part: all of them, or the lower triangle (top-left aligned)."""
    if not causal:
        return tq * tk
    # row i sees keys 0..i (capped at tk)
    full = min(tq, tk)
    return full * (full + 1) // 2 + max(tq - tk, 0) * tk


def forward_flops(case: AttentionCase) -> int:
    """4 * B * H * (attended pairs) * d."""
    return 4 * case.batch * case.heads * attended_pairs(case.tq, case.tk, case.causal) * case.d


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
    """g = B * H * Tq * Tk * d: the complexity term the scaling fit uses (masking ignored)."""
    return case.batch * case.heads * case.tq * case.tk * case.d
