"""The cases and block sizes both tiled test modules (test_tiled.py, test_tiled_fused.py) run every
kernel on, and their oracle: odd sizes, tk != tq, causal, masks with empty rows, GQA, transposed and
strided layouts, float64 with large inputs."""

from __future__ import annotations

import torch

from harness.cases import AttentionCase
from harness.oracle import reference_attention

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
