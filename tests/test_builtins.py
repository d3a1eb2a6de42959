"""Each built-in agrees with the float64 oracle on a few shapes (the full suite is `attnbench verify`)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from harness.case.attention import AttentionCase
from harness.contract.discovery import load_registry
from harness.reference.oracle import reference_attention
from harness.reference.tensors import Inputs, dtype_name, make_inputs, to_float64

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
    AttentionCase(batch=2, heads=8, kv_heads=2, tq=1, tk=70, d=16, mask="key_padding"),  # decode: a group's rows stacked
    AttentionCase(batch=1, heads=2, tq=300, d=32, dtype="float64", inputs="large", layout="transposed"),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
@pytest.mark.parametrize("name", BUILTINS)
def test_builtin_matches_oracle(name: str, case: AttentionCase) -> None:
    impl = REGISTRY.get(name)
    reasons = impl.not_supported_reasons(case)
    if reasons:
        pytest.skip("; ".join(reasons))
    inputs = make_inputs(case, seed=1, backend=impl.declared.backend)
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
        inputs = make_inputs(case, seed=3, backend=impl.declared.backend)
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


FEATURES_2025 = [  # gpt-oss's sinks, Gemma 2's soft-cap, DeepSeek MLA's dv != d: alone, with GQA, with empty rows
    AttentionCase(batch=2, heads=4, kv_heads=2, tq=13, tk=17, d=16, sinks=True, causal=True),
    AttentionCase(batch=2, heads=2, tq=11, tk=19, d=8, sinks=True, mask="empty_rows"),
    AttentionCase(heads=2, tq=15, d=32, softcap=5.0, inputs="large", causal=True),
    AttentionCase(batch=2, heads=2, tq=11, tk=19, d=8, softcap=2.0, mask="empty_rows"),
    AttentionCase(heads=4, kv_heads=2, tq=9, tk=14, d=24, dv=16, mask="random"),
    AttentionCase(heads=2, kv_heads=1, tq=7, tk=12, d=48, dv=32, sinks=True, softcap=5.0, mask="empty_rows"),
]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("case", FEATURES_2025, ids=lambda c: c.id)
@pytest.mark.parametrize("name", ["numpy_naive", "torch_eager", "torch_sdpa", "torch_sdpa_math"])
def test_sinks_softcap_and_value_dim_match_the_oracle(name: str, case: AttentionCase, dtype: str) -> None:
    """What each declares of the 2025 features is computed as the oracle does: a row with no allowed key is zero
    with a sink too, and the output has V's head dim. torch_sdpa declares dv != d only."""
    impl = REGISTRY.get(name)
    case = case.with_(dtype=dtype)
    if name.startswith("torch_sdpa"):
        assert impl.declared.value_dim and not impl.declared.sinks and not impl.declared.softcap
    else:
        assert impl.declared.sinks and impl.declared.softcap and impl.declared.value_dim
    reasons = impl.not_supported_reasons(case)
    if reasons:
        assert name.startswith("torch_sdpa") and (case.sinks or case.softcap is not None), reasons
        return
    inputs = make_inputs(case, seed=2, backend=impl.declared.backend)
    got = to_float64(impl(inputs.q, inputs.k, inputs.v, **inputs.kwargs(case)))
    want = reference_attention(inputs.q64, inputs.k64, inputs.v64, **inputs.oracle_kwargs(case))
    assert tuple(got.shape) == (case.batch, case.heads, case.tq, case.value_dim)
    assert torch.isfinite(got).all()
    tol = 1e-12 if dtype == "float64" else 2e-5
    assert (got - want).abs().max().item() < tol * max(1.0, want.abs().max().item())


def _with_sinks_grads(fn: Any, case: AttentionCase, inputs: Inputs, dout: torch.Tensor, oracle: bool = False
                      ) -> tuple[torch.Tensor, ...]:
    """(out, dq, dk, dv, d sinks) of ``fn`` on the case's inputs (the float64 ones for the ``oracle``), by autograd
    with the sinks a leaf of their own."""
    arrays = (inputs.q64, inputs.k64, inputs.v64, inputs.sinks64) if oracle else (inputs.q, inputs.k, inputs.v,
                                                                                   inputs.sinks)
    kwargs = inputs.oracle_kwargs(case) if oracle else inputs.kwargs(case)
    leaves = [x.detach().clone().requires_grad_(True) for x in arrays]
    out = fn(*leaves[:3], sinks=leaves[3], **{key: value for key, value in kwargs.items() if key != "sinks"})
    return (out, *torch.autograd.grad(out, leaves, dout))


def test_torch_eager_gradients_reach_the_sinks_through_the_soft_cap_and_value_dim() -> None:
    """dq, dk, dv and d sinks by autograd through torch_eager equal the float64 oracle's, rows with no key included."""
    case = AttentionCase(batch=2, heads=4, kv_heads=2, tq=9, tk=13, d=16, dv=8, sinks=True, softcap=3.0,
                         mask="empty_rows", dtype="float64")
    inputs = make_inputs(case, seed=4)
    dout = torch.randn(case.batch, case.heads, case.tq, case.value_dim, dtype=torch.float64,
                       generator=torch.Generator().manual_seed(5))

    got = _with_sinks_grads(REGISTRY.get("torch_eager"), case, inputs, dout)[1:]
    want = _with_sinks_grads(reference_attention, case, inputs, dout, oracle=True)[1:]
    for name, g, w in zip(("dq", "dk", "dv", "dsinks"), got, want):
        assert torch.isfinite(g).all(), name
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-12, msg=name)
    assert want[3].abs().max() > 0  # the sinks' gradient is checked, not vacuous


@pytest.mark.parametrize("model,feature", [("gemma-2-9b", "softcap"), ("gpt-oss-20b", "sinks"),
                                           ("deepseek-v3-mla-decode", "dv")])
def test_every_2025_model_preset_runs_at_least_two_builtins(model: str, feature: str) -> None:
    """``verify --model`` plans each model's own cases (its soft-cap, sinks or V head dim included); at least two
    built-ins can run every one of them (the gradient cases where they declare gradients), rather than all being
    skipped for a feature they lack."""
    from harness.case.models import model_named
    from harness.verify.model_cases import model_kernel_cases, model_plan_of

    plan = model_plan_of(model_named(model), memory_bytes=16 * 2**30)
    runs = []
    for name in ("numpy_naive", "torch_eager", "torch_sdpa", "tiled", "tiled_fused"):
        impl = REGISTRY.get(name)
        cases = [c for c in model_kernel_cases(impl, plan) if impl.declared.grad or not c.grad]
        assert cases and all(getattr(c, feature) for c in cases), name  # the feature is in the model's cases
        if not any(impl.not_supported_reasons(c) for c in cases):
            runs.append(name)
    assert len(runs) >= 2 and {"numpy_naive", "torch_eager"} <= set(runs), runs
    if feature == "softcap":  # attnbench's own kernels take Gemma 2's soft-cap, so its bench has them to compare
        from implementations.tiled_fused import available

        assert {"tiled", *(["tiled_fused"] if available() is None else [])} <= set(runs), runs


@pytest.mark.parametrize("causal", [False, True])
def test_tiled_fused_takes_sinks_exactly_in_both_passes(causal: bool) -> None:
    """tiled_fused applies learned sinks to its kernel's output and LSE: output, dq, dk, dv and d sinks equal the
    float64 oracle's, for a GQA case whose masked rows have no key (their output stays 0, their sink's share 1)."""
    impl = REGISTRY.get("tiled_fused")
    case = AttentionCase(batch=2, heads=4, kv_heads=2, tq=9, tk=13, d=16, sinks=True, mask="empty_rows", causal=causal,
                         dtype="float64")
    reasons = impl.not_supported_reasons(case)
    if reasons:
        pytest.skip(f"tiled_fused cannot run here: {reasons}")
    inputs = make_inputs(case, seed=6)
    dout = torch.randn(case.batch, case.heads, case.tq, case.d, dtype=torch.float64,
                       generator=torch.Generator().manual_seed(7))

    got = _with_sinks_grads(impl, case, inputs, dout)
    want = _with_sinks_grads(reference_attention, case, inputs, dout, oracle=True)
    for name, g, w in zip(("out", "dq", "dk", "dv", "dsinks"), got, want):
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-12, msg=name)
    assert want[4].abs().max() > 0 and (want[0] == 0).all(-1).any()  # d sinks checked; some row has no key
