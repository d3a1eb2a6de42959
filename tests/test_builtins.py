"""Each built-in agrees with the float64 oracle on a few shapes (the full suite is `attnbench verify`)."""

from __future__ import annotations

import pytest
import torch

from harness.case.attention import AttentionCase
from harness.contract.discovery import load_registry
from harness.reference.oracle import reference_attention
from harness.reference.tensors import dtype_name, make_inputs, to_float64

pytestmark = pytest.mark.tier  # results depend on the CPU's tier: CI runs it again capped (scripts/at_tier.py)

REGISTRY = load_registry()
BUILTINS = ["numpy_naive", "torch_eager", "torch_sdpa", "torch_sdpa_math", "torch_sdpa_flash", "tiled"]
CASES = [
    AttentionCase(batch=2, heads=3, tq=17, d=16),
    AttentionCase(batch=1, heads=2, tq=33, tk=70, d=8, scale=0.3),
    AttentionCase(batch=2, heads=2, tq=40, d=16, causal=True),
    AttentionCase(batch=2, heads=2, tq=20, tk=31, d=16, mask="random"),
    AttentionCase(batch=2, heads=2, tq=20, tk=31, d=16, mask="empty_rows"),
    AttentionCase(batch=2, heads=2, tq=24, d=16, mask="key_padding", causal=True),
    AttentionCase(batch=1, heads=8, kv_heads=2, tq=19, d=16, causal=True),
    AttentionCase(batch=1, heads=4, kv_heads=1, tq=9, tk=150, d=8, layout="strided"),
    AttentionCase(batch=1, heads=2, tq=300, d=32, dtype="float64", inputs="large", layout="transposed"),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
@pytest.mark.parametrize("name", BUILTINS)
def test_builtin_matches_oracle(name: str, case: AttentionCase) -> None:
    impl = REGISTRY.get(name)
    reasons = impl.not_supported_reasons(case)
    if reasons:
        pytest.skip("; ".join(reasons))
    inputs = make_inputs(case, seed=1, backend=impl.backend)
    out = impl(inputs.q, inputs.k, inputs.v, **inputs.kwargs(case))
    assert tuple(out.shape) == (case.batch, case.heads, case.tq, case.d)
    assert dtype_name(out) == case.dtype
    expected = reference_attention(inputs.q64, inputs.k64, inputs.v64, causal=case.causal,
                                   mask=inputs.mask64, scale=case.scale)
    got = to_float64(out)
    assert torch.isfinite(got).all()
    tol = 1e-10 if case.dtype == "float64" else 2e-5
    assert (got - expected).abs().max().item() < tol * max(1.0, expected.abs().max().item())


def test_fully_masked_rows_are_zero_not_nan() -> None:
    case = AttentionCase(batch=1, heads=2, tq=8, d=8, mask="empty_rows")
    for name in BUILTINS:
        impl = REGISTRY.get(name)
        inputs = make_inputs(case, seed=3, backend=impl.backend)
        out = to_float64(impl(inputs.q, inputs.k, inputs.v, **inputs.kwargs(case)))
        empty = ~inputs.mask64.any(-1)
        assert empty.any()
        assert (out[empty] == 0).all(), name


def test_numpy_naive_keeps_float32() -> None:
    case = AttentionCase(batch=1, heads=1, tq=5, d=7)
    inputs = make_inputs(case, seed=0, backend="numpy")
    out = REGISTRY.get("numpy_naive")(inputs.q, inputs.k, inputs.v, causal=True)
    assert out.dtype.name == "float32"


def test_oracle_gqa_maps_query_head_to_kv_head_by_integer_division() -> None:
    q = torch.randn(1, 4, 3, 2, dtype=torch.float64)
    k = torch.randn(1, 2, 5, 2, dtype=torch.float64)
    v = torch.randn(1, 2, 5, 2, dtype=torch.float64)
    out = reference_attention(q, k, v)
    for h in range(4):
        alone = reference_attention(q[:, h:h + 1], k[:, h // 2:h // 2 + 1], v[:, h // 2:h // 2 + 1])
        torch.testing.assert_close(out[:, h:h + 1], alone)


def test_sdpa_is_refused_at_scale_zero_with_causal_exactly_where_pytorch_returns_nan() -> None:
    """A refusal, not a wrong answer: where PyTorch's own dispatch gives NaN, the reason says so; else it runs."""
    registry = load_registry()
    case = AttentionCase(tq=17, tk=23, d=16, causal=True, scale=0.0)
    inputs = make_inputs(case, seed=0)
    for name in ("torch_sdpa", "torch_sdpa_flash", "torch_sdpa_math"):
        impl = registry.get(name)
        reasons = impl.not_supported_reasons(case)
        if reasons:
            assert any("NaN" in r and "scale=0" in r for r in reasons), reasons
            continue
        out = impl.prepare(inputs.q, inputs.k, inputs.v, **inputs.kwargs(case))()
        assert torch.isfinite(out).all(), name
    assert not registry.get("torch_sdpa").not_supported_reasons(case.with_(causal=False))
