"""The tiled kernels (`tiled`, `tiled_numpy`): exact against the oracle for any block size,
gradients by recomputation, the returned log-sum-exp, causal block skipping, untouched inputs."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from tiled_cases import CASES, check_block_sizes

from harness.case.attention import AttentionCase
from harness.contract.discovery import load_registry
from harness.errors import UsageError
from harness.reference.oracle import reference_attention
from harness.reference.tensors import make_inputs, to_float64
from implementations._flash_cpu import flash_attention, pick_blocks

pytestmark = pytest.mark.tier  # results depend on the CPU's tier: CI runs it again capped (scripts/at_tier.py)

REGISTRY = load_registry()
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
@pytest.mark.parametrize("name", ["tiled", "tiled_numpy"])
def test_any_block_size_matches_the_oracle(name: str, case: AttentionCase) -> None:
    impl = REGISTRY.get(name)
    assert impl.declared.block_q and impl.declared.block_k
    inputs = make_inputs(case, seed=2, backend=impl.declared.backend)
    before = [np.array(x, copy=True) if impl.declared.backend == "numpy" else x.clone() for x in (inputs.q, inputs.k, inputs.v)]
    check_block_sizes(impl, inputs, case, 1e-11 if case.dtype == "float64" else 3e-6)
    for old, new in zip(before, (inputs.q, inputs.k, inputs.v)):
        assert (old == new).all(), "an input was modified"


@pytest.mark.parametrize("case", [c.with_(grad=True) for c in CASES if c.dtype == "float32"] + [
    AttentionCase(batch=1, heads=4, kv_heads=1, tq=33, d=8, dtype="bfloat16", causal=True, grad=True)],
    ids=lambda c: c.id)
def test_gradients_by_recomputation_match_the_oracle(case: AttentionCase) -> None:
    inputs = make_inputs(case, seed=5)
    grad_out = torch.randn(case.batch, case.heads, case.tq, case.d, dtype=torch.float64)
    q64, k64, v64 = (x.clone().requires_grad_() for x in (inputs.q64, inputs.k64, inputs.v64))
    reference_attention(q64, k64, v64, causal=case.causal, mask=inputs.mask64, scale=case.scale).backward(grad_out)
    tol = 3e-2 if case.dtype == "bfloat16" else 1e-5
    for block_q, block_k in [(16, 32), (32, 16)]:
        q, k, v = (x.detach().clone().requires_grad_() for x in (inputs.q, inputs.k, inputs.v))
        out = REGISTRY.get("tiled")(q, k, v, **inputs.kwargs(case), block_q=block_q, block_k=block_k)
        out.backward(grad_out.to(out.dtype))
        for got, want in ((q.grad, q64.grad), (k.grad, k64.grad), (v.grad, v64.grad)):
            assert got.dtype == q.dtype and got.shape == want.shape
            err = (to_float64(got) - want).abs().max().item()
            assert err < tol * max(1.0, want.abs().max().item()), err


def test_log_sum_exp_is_returned_and_empty_rows_give_minus_infinity() -> None:
    case = AttentionCase(batch=1, heads=2, tq=30, tk=50, d=16, mask="empty_rows")
    inputs = make_inputs(case, seed=7)
    out, lse = flash_attention(inputs.q, inputs.k, inputs.v, mask=inputs.mask, block_q=16, block_k=16)
    scores = (inputs.q64 @ inputs.k64.transpose(-1, -2)) / math.sqrt(case.d)
    expected = scores.masked_fill(~inputs.mask64, -math.inf).logsumexp(-1)
    empty = ~inputs.mask64.any(-1)
    assert empty.any() and (lse[empty] == -math.inf).all() and (out[empty] == 0).all()
    assert torch.allclose(lse[~empty].double(), expected[~empty], atol=1e-5)


def test_causal_never_reads_key_blocks_above_the_diagonal() -> None:
    """NaN keys and values past row 32: with 16-row blocks, query rows 0-31 never visit them."""
    q, k, v = (torch.randn(1, 2, 64, 8) for _ in range(3))
    k[:, :, 32:] = float("nan")
    v[:, :, 32:] = float("nan")
    out = REGISTRY.get("tiled")(q, k, v, causal=True, block_q=16, block_k=16)
    assert torch.isfinite(out[:, :, :32]).all()
    out = REGISTRY.get("tiled_numpy")(q.numpy(), k.numpy(), v.numpy(), causal=True, block_q=16, block_k=16)
    assert np.isfinite(out[:, :, :32]).all()


def test_block_sizes_chosen_per_shape_are_sane() -> None:
    assert pick_blocks(4096, 4096, 64) == (256, 512)
    for tq, tk, d in [(1, 1, 8), (100, 9000, 128), (5000, 30, 256)]:
        block_q, block_k = pick_blocks(tq, tk, d)
        assert 1 <= block_q <= max(tq, 16) and 1 <= block_k <= max(tk, 16)


def test_numpy_version_keeps_float32() -> None:
    case = AttentionCase(batch=1, heads=2, tq=40, d=8, causal=True)
    inputs = make_inputs(case, seed=0, backend="numpy")
    assert REGISTRY.get("tiled_numpy")(inputs.q, inputs.k, inputs.v, causal=True).dtype == np.float32


def test_bad_block_sizes_are_a_usage_error() -> None:
    q = torch.randn(1, 1, 8, 4)
    with pytest.raises(UsageError, match="block_k=0"):
        REGISTRY.get("tiled")(q, q, q, block_k=0)
