"""The sampled-row oracle is the whole oracle restricted to those rows, for every structure the contract has."""

from __future__ import annotations

import pytest
import torch

from harness.case.attention import AttentionCase
from harness.reference.oracle import reference_attention, reference_rows, sample_rows
from harness.reference.tensors import make_inputs

CASES = [
    AttentionCase(tq=23, d=8),
    AttentionCase(heads=4, kv_heads=2, tq=19, tk=31, d=8, causal=True),
    AttentionCase(tq=31, tk=19, d=8, causal=True, causal_align="bottom_right"),
    AttentionCase(tq=29, d=8, window=(3, 2)),
    AttentionCase(tq=17, tk=40, d=8, causal=True, window=(5, 0), causal_align="bottom_right"),
    AttentionCase(tq=28, tk=24, d=8, causal=True, varlen=((3, 9), (0, 4), (12, 4), (2, 0), (11, 7))),
    AttentionCase(batch=3, tq=1, tk=20, d=8, cache_seqlens=(0, 20, 7)),
    AttentionCase(batch=2, heads=2, tq=21, d=8, mask="random", scale=0.3),
    AttentionCase(tq=21, d=8, bias="alibi"),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_rows_match_the_whole_oracle(case: AttentionCase) -> None:
    inputs = make_inputs(case, seed=3)
    kwargs = inputs.oracle_kwargs(case)
    whole = reference_attention(inputs.q64, inputs.k64, inputs.v64, **kwargs)
    rows = sample_rows(case.tq, 7, torch.Generator().manual_seed(1))
    part = reference_rows(inputs.q64, inputs.k64, inputs.v64, rows, **kwargs)
    assert part.shape == (*whole.shape[:2], len(rows), whole.shape[-1])
    torch.testing.assert_close(part, whole[:, :, rows], rtol=0, atol=1e-12)


def test_sample_rows_keeps_both_ends_and_is_distinct() -> None:
    rows = sample_rows(1000, 16, torch.Generator().manual_seed(0))
    assert rows[0] == 0 and rows[-1] == 999 and len(set(rows.tolist())) == 16
    assert torch.equal(sample_rows(5, 16), torch.arange(5))
