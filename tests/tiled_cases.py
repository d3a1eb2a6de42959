"""The cases and block sizes both tiled test modules (test_tiled.py, test_tiled_fused.py) run every
kernel on, and their oracle: odd sizes, tk != tq, causal, masks with empty rows, GQA, transposed and
strided layouts, float64 with large inputs."""

from __future__ import annotations

from collections.abc import Callable

import torch

from harness.case.attention import AttentionCase
from harness.reference.oracle import reference_attention
from harness.reference.tensors import dtype_name, to_float64

CASES = [
    AttentionCase(batch=2, heads=3, tq=37, d=16),
    AttentionCase(batch=1, heads=2, tq=33, tk=70, d=8, scale=0.3),
    AttentionCase(batch=2, heads=2, tq=50, d=16, causal=True),
    AttentionCase(batch=2, heads=4, kv_heads=2, tq=20, tk=45, d=16, mask="empty_rows"),
    AttentionCase(batch=2, heads=2, tq=40, d=16, mask="key_padding", causal=True, layout="transposed"),
    AttentionCase(batch=1, heads=6, kv_heads=2, tq=29, d=8, causal=True, layout="strided"),
    AttentionCase(batch=1, heads=2, tq=64, d=32, dtype="float64", inputs="large"),
]
BLOCKS = [(16, 16), (16, 64), (64, 16), (None, None)]


def oracle(inputs, case: AttentionCase) -> torch.Tensor:
    """The float64 reference output of ``case`` on ``inputs``."""
    return reference_attention(inputs.q64, inputs.k64, inputs.v64, causal=case.causal,
                               mask=inputs.mask64, scale=case.scale)


def check_block_sizes(impl: Callable, inputs, case: AttentionCase, tol: float) -> None:
    """``impl`` on ``inputs`` with every size of :data:`BLOCKS` (None: its own choice) matches the oracle
    within ``tol`` relative to the largest output, in the case's dtype and shape."""
    expected = oracle(inputs, case)
    for block_q, block_k in BLOCKS:
        sizes = {} if block_q is None else {"block_q": block_q, "block_k": block_k}
        out = impl(inputs.q, inputs.k, inputs.v, **inputs.kwargs(case), **sizes)
        assert dtype_name(out) == case.dtype and tuple(out.shape) == (case.batch, case.heads, case.tq, case.d)
        err = (to_float64(out) - expected).abs().max().item()
        assert err < tol * max(1.0, expected.abs().max().item()), (block_q, block_k, err)
