"""Positional variants: ALiBi slopes and bias, RoPE in both conventions, against independent formulas
and against the `rotary-embedding-torch` package where its convention (interleaved) matches."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from harness.case.positional import (
    ROPE_CONVENTIONS,
    alibi_bias,
    alibi_slopes,
    apply_rope,
    rope_angles,
    rope_permutation,
    rope_tables,
)
from implementations.module_numpy_mha import rope_numpy
from implementations.module_torch_mha import rope_torch


def test_alibi_slopes_are_the_geometric_sequence_of_the_paper() -> None:
    assert alibi_slopes(8).tolist() == [2.0 ** -i for i in range(1, 9)]
    assert alibi_slopes(4).tolist() == [2.0 ** -2, 2.0 ** -4, 2.0 ** -6, 2.0 ** -8]


def test_alibi_bias_is_minus_slope_times_distance() -> None:
    bias = alibi_bias(4, 5, 7)
    assert bias.shape == (1, 4, 5, 7)
    assert float(bias[0, 1, 4, 0]) == -(2.0 ** -4) * 4
    assert float(bias[0, 3, 2, 6]) == -(2.0 ** -8) * 4
    assert torch.all(bias.diagonal(dim1=-2, dim2=-1) == 0)


def _pairs_rotated(x: torch.Tensor, convention: str) -> torch.Tensor:
    """The textbook 2x2 rotation written with explicit indices, pair by pair (slow, obviously right)."""
    t, d = x.shape[-2], x.shape[-1]
    out = x.clone()
    for pos in range(t):
        for i in range(d // 2):
            a, b = (2 * i, 2 * i + 1) if convention == "interleaved" else (i, i + d // 2)
            angle = pos * 10000.0 ** (-2.0 * i / d)
            c, s = np.cos(angle), np.sin(angle)
            out[..., pos, a] = x[..., pos, a] * c - x[..., pos, b] * s
            out[..., pos, b] = x[..., pos, a] * s + x[..., pos, b] * c
    return out


@pytest.mark.parametrize("convention", ROPE_CONVENTIONS)
def test_rope_matches_the_explicit_rotation(convention: str) -> None:
    x = torch.randn(2, 3, 9, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(apply_rope(x, convention), _pairs_rotated(x, convention), rtol=0, atol=1e-14)


@pytest.mark.parametrize("convention", ROPE_CONVENTIONS)
def test_rope_scores_depend_only_on_relative_position(convention: str) -> None:
    gen = torch.Generator().manual_seed(1)
    q, k = (torch.randn(1, 16, dtype=torch.float64, generator=gen) for _ in range(2))
    seq_q, seq_k = q.expand(12, 16), k.expand(12, 16)  # the same vectors at every position
    scores = apply_rope(seq_q, convention) @ apply_rope(seq_k, convention).T
    for shift in range(-3, 4):  # every (i, i + shift) pair gives the same score
        diagonal = scores.diagonal(shift)
        torch.testing.assert_close(diagonal, diagonal[:1].expand_as(diagonal), rtol=0, atol=1e-12)
    assert torch.allclose(apply_rope(seq_q, convention).norm(dim=-1), seq_q.norm(dim=-1))


def test_the_two_conventions_differ_by_a_feature_permutation_only() -> None:
    x = torch.randn(2, 10, 8, dtype=torch.float64)
    perm = rope_permutation(8)
    assert not torch.allclose(apply_rope(x, "rotate_half"), apply_rope(x, "interleaved"))
    torch.testing.assert_close(apply_rope(x, "interleaved")[..., perm], apply_rope(x[..., perm], "rotate_half"),
                               rtol=0, atol=0)


def _rotary_package(d: int, dtype: torch.dtype):
    from rotary_embedding_torch import RotaryEmbedding

    inv_freq = 1.0 / 10000.0 ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    # float64 frequencies and no float32 cache: the package's own arithmetic in float64
    return RotaryEmbedding(d, custom_freqs=inv_freq.to(dtype), cache_if_possible=False).to(dtype)


def test_interleaved_matches_rotary_embedding_torch_in_float64() -> None:
    pytest.importorskip("rotary_embedding_torch")
    x = torch.randn(2, 4, 50, 16, dtype=torch.float64)
    theirs = _rotary_package(16, torch.float64).rotate_queries_or_keys(x)
    torch.testing.assert_close(theirs, apply_rope(x, "interleaved"), rtol=0, atol=1e-12)
    # ...and its convention is NOT rotate-half, despite its helper's name
    assert (theirs - apply_rope(x, "rotate_half")).abs().max() > 0.1


def test_rotary_embedding_torch_default_float32_is_within_float32_rounding() -> None:
    pytest.importorskip("rotary_embedding_torch")
    from rotary_embedding_torch import RotaryEmbedding

    x = torch.randn(1, 2, 100, 32, dtype=torch.float64)
    theirs = RotaryEmbedding(32).rotate_queries_or_keys(x.float()).double()
    assert (theirs - apply_rope(x, "interleaved")).abs().max() < 5e-5  # angles up to 99 rad in float32


@pytest.mark.parametrize("convention", ROPE_CONVENTIONS)
def test_the_built_in_modules_rope_matches_the_reference(convention: str) -> None:
    x = torch.randn(2, 3, 20, 12, dtype=torch.float64)
    ref = apply_rope(x, convention)
    torch.testing.assert_close(rope_torch(x, convention), ref, rtol=0, atol=1e-13)
    torch.testing.assert_close(torch.from_numpy(rope_numpy(x.numpy(), convention)), ref, rtol=0, atol=1e-13)
    cos, sin = rope_tables(20, 12, convention)
    swapped = (torch.stack([-x[..., 1::2], x[..., 0::2]], -1).flatten(-2) if convention == "interleaved"
               else torch.cat([-x[..., 6:], x[..., :6]], -1))
    torch.testing.assert_close(x * cos + swapped * sin, ref, rtol=0, atol=1e-13)


def test_rope_rejects_odd_dimensions_and_unknown_conventions() -> None:
    with pytest.raises(ValueError, match="even"):
        rope_angles(4, 7)
    with pytest.raises(ValueError, match="rotate_half"):
        apply_rope(torch.zeros(2, 4), "neox")
