"""The pass rule, the suites and the checks, on small direct examples (no worker processes)."""

from __future__ import annotations

import pytest
import torch

from harness.case.attention import AttentionCase
from harness.contract.discovery import load_registry
from harness.contract.registry import make_implementation
from harness.reference.oracle import reference_attention
from harness.reference.tensors import make_inputs
from harness.reference.tolerance import EPS, FLOORS, baseline_attention, compare
from harness.verify.case_checks import check_kernel_case
from harness.verify.suites import SUITES, kernel_cases
from harness.verify.worker import kind_functions

pytestmark = pytest.mark.tier  # results depend on the CPU's tier: CI runs it again capped (scripts/at_tier.py)

REGISTRY = load_registry()


def test_all_zeros_fails_on_small_values_by_relative_l2() -> None:
    oracle = torch.full((1, 1, 4, 4), 1e-7, dtype=torch.float64)
    base = oracle * (1 + 1e-7)
    verdict = compare(torch.zeros_like(oracle), oracle, base, dtype="float32", m=2)
    assert (oracle.abs().max() < FLOORS["float32"]) and not verdict.ok
    assert "relative L2" in (verdict.reason or "")


def test_nan_where_the_oracle_is_finite_fails_and_says_where() -> None:
    oracle = torch.ones(1, 1, 3, 2, dtype=torch.float64)
    got = oracle.clone()
    got[0, 0, 2, 1] = float("nan")
    verdict = compare(got, oracle, oracle, dtype="float32", m=2)
    assert not verdict.ok and "NaN/Inf" in verdict.reason and "[0, 0, 2, 1]" in verdict.reason


def test_error_within_m_times_the_baseline_passes_and_beyond_fails() -> None:
    oracle = torch.ones(1, 1, 2, 2, dtype=torch.float64)
    base = oracle + 1e-3
    within = compare(oracle + 1.9e-3, oracle, base, dtype="float32", m=2)
    assert within.ok and within.metrics["bound"] == pytest.approx(2e-3 + 1e-6)
    verdict = compare(oracle + 2.1e-3, oracle, base, dtype="float32", m=2)
    assert "max|err|" in (verdict.reason or "")
    assert not verdict.ok and verdict.metrics["ratio"] == pytest.approx(2.1)


def test_baseline_in_float32_is_close_and_zeroes_rows_with_no_key() -> None:
    case = AttentionCase(batch=2, heads=2, tq=9, tk=13, d=8, mask="empty_rows")
    inputs = make_inputs(case, seed=0)
    oracle = reference_attention(inputs.q64, inputs.k64, inputs.v64, mask=inputs.mask64)
    base = baseline_attention(inputs.q, inputs.k, inputs.v, mask=inputs.mask).double()
    assert (base - oracle).abs().max() < 1e-5
    empty = ~inputs.mask64.any(-1)
    assert empty.any() and (base[empty] == 0).all()


@pytest.mark.parametrize("suite", SUITES)
def test_cases_follow_declared_capabilities(suite: str) -> None:
    plain = make_implementation("plain", lambda q, k, v, **kw: q, backend="torch", dtypes=("float32", "float16"))
    cases = kernel_cases(plain, suite)
    assert cases and len({c.id for c in cases}) == len(cases)
    assert not any(c.causal or c.mask != "none" or c.kv_heads != c.heads or c.grad or c.bias != "none" for c in cases)
    assert {c.dtype for c in cases} == {"float32", "float16"}
    if suite == "small":
        assert max(max(c.tq, c.tk) for c in cases) <= 64


def test_full_suite_covers_the_matrix() -> None:
    cases = kernel_cases(REGISTRY.get("torch_eager"), "full")
    lengths = {c.tq for c in cases if c.tq == c.tk}
    assert {1, 2, 3, 17, 64, 97, 128, 257, 1000, 1025} <= lengths
    assert {(1, 239), (113, 203), (512, 256), (3, 799)} <= {(c.tq, c.tk) for c in cases}
    assert {8, 16, 32, 40, 59, 64, 80, 128} <= {c.d for c in cases}
    assert {(8, 2), (8, 1), (1, 1), (3, 3), (8, 8)} <= {(c.heads, c.kv_heads) for c in cases}
    assert {1, 3} <= {c.batch for c in cases}
    assert {"random", "key_padding", "empty_rows"} <= {c.mask for c in cases}
    assert {"float64", "float32", "float16", "bfloat16"} <= {c.dtype for c in cases}
    assert {"large", "rand"} <= {c.inputs for c in cases} and {"transposed", "strided"} <= {c.layout for c in cases}
    assert any(c.self_attention for c in cases) and any(c.scale for c in cases) and any(c.grad for c in cases)
    assert any(c.causal for c in cases) and any(c.bias == "alibi" for c in cases)


@pytest.mark.usefixtures("one_thread")
def test_a_correct_builtin_passes_every_check_of_a_case() -> None:
    case = AttentionCase(batch=3, heads=4, kv_heads=2, tq=19, d=16, causal=True, mask="random", grad=True)
    results = check_kernel_case(REGISTRY.get("torch_eager"), case, 3)
    assert [r["check"] for r in results][:2] == ["output", "grad"]
    assert all(r["status"] == "pass" for r in results), results
    no_grad = check_kernel_case(REGISTRY.get("torch_eager"), case.with_(grad=False), 3)
    assert {"property:convex_hull", "property:slices"} <= {r["check"] for r in no_grad}
    assert all(r["status"] == "pass" for r in no_grad), no_grad


def test_a_contract_break_inside_a_property_is_a_failure_not_an_error() -> None:
    def transposed(q, k, v, **kw):
        return torch.softmax(q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5, -1).matmul(v).transpose(1, 2)

    impl = make_implementation("transposed", transposed, backend="torch")
    results = check_kernel_case(impl, AttentionCase(batch=2, heads=3, tq=5, d=8), 3)
    assert {r["status"] for r in results} == {"fail"}
    assert all("shape" in r["reason"] for r in results)


def test_an_unknown_kind_has_a_reason_instead_of_a_checker() -> None:
    reason = kind_functions("nope")
    assert isinstance(reason, str) and "no verifier for kind 'nope'" in reason


@pytest.mark.usefixtures("one_thread")
def test_a_flash_attention_backward_recomputing_p_from_the_saved_lse_passes_with_large_logits() -> None:
    """The relative-L2 bound carries the floor's large-logit allowance: without it this correct backward
    failed dq on the norm (2.7e-4 > 1.5e-4) with its max error 80x under its bound."""
    from pathlib import Path

    from harness.verify.checks import check_grad

    plugin = Path(__file__).parent / "plugins" / "unusual_lse_backward.py"
    impl = load_registry((str(plugin),)).get("unusual_lse_backward")
    case = AttentionCase(batch=2, heads=4, kv_heads=2, tq=2, tk=17, d=16, causal=True, mask="random", mask_rank="2d",
                         scale=0.3, inputs="large", layout="transposed", grad=True)
    assert case.id == "B2-H4/2-T2x17-d16-float32-causal-mask=random/2d-scale=0.3-in=large-transposed-grad"
    result = check_grad(impl, case, 3)
    assert result["status"] == "pass", result["reason"]


def test_the_relative_l2_allowance_for_large_logits_still_fails_a_wrong_answer() -> None:
    gen = torch.Generator().manual_seed(0)
    oracle = torch.randn(1, 2, 8, 16, generator=gen, dtype=torch.float64) * 1e-3  # below the floor: the norm decides
    rounded = oracle.to(torch.float32).to(torch.float64)
    relative = oracle * (1 + 3e-4)  # 3e-4 relative everywhere: above the norm bound without logits
    verdict = compare(relative, oracle, rounded, dtype="float32", m=2)
    assert not verdict.ok and "relative L2" in (verdict.reason or "")
    assert compare(relative, oracle, rounded, dtype="float32", m=2, logit_max=2000.0).ok
    for wrong in (torch.zeros_like(oracle), oracle.flip(-2)):  # far off: the allowance does not hide it
        assert not compare(wrong, oracle, rounded, dtype="float32", m=2, logit_max=30.0).ok


def test_the_dv_allowance_for_large_logits_scales_by_the_terms_each_element_sums() -> None:
    """dV = P^T dO sums a GQA group's rows: terms of size A that cancel to a small dV still carry eps * max|logit|
    * A of a recomputed P's rounding. The allowance scales by A (``logit_magnitude``); a wrong answer still fails."""
    oracle = torch.full((1, 1, 4, 8), 0.5, dtype=torch.float64)
    rounded = oracle.to(torch.float32).to(torch.float64)
    terms, logits = 40.0, 300.0
    moved = oracle.clone()
    moved[0, 0, 1, 2] += 0.5 * terms * EPS["float32"] * logits  # half the allowance the terms give
    assert not compare(moved, oracle, rounded, dtype="float32", m=3, logit_max=logits).ok
    assert compare(moved, oracle, rounded, dtype="float32", m=3, logit_max=logits, logit_magnitude=terms).ok
    wrong = oracle * 1.01
    assert not compare(wrong, oracle, rounded, dtype="float32", m=3, logit_max=logits, logit_magnitude=terms).ok


def test_the_backward_floor_reads_the_size_of_the_terms_of_each_logit_and_of_dv() -> None:
    """The gradient floor's two sizes, against the same sums written out in float64: the logits' terms
    (|scale| sum |q_i k_i|, never below |logit|) and dV's (max of P^T |dO| summed over each KV head's group)."""
    from harness.verify.checks import _value_terms, logit_max

    case = AttentionCase(batch=1, heads=6, kv_heads=2, tq=3, tk=9, d=16, scale=0.3, inputs="large", grad=True)
    inputs = make_inputs(case, 5)
    q, k = inputs.q64, inputs.k64.repeat_interleave(3, 1)
    terms = float((q.abs() @ k.abs().transpose(-1, -2)).max()) * 0.3
    assert logit_max(case, inputs, terms=True) == pytest.approx(terms, rel=1e-12)
    assert logit_max(case, inputs, terms=True) >= logit_max(case, inputs)
    dout = torch.randn(1, 6, 3, 16, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    p = torch.softmax(q @ k.transpose(-1, -2) * 0.3, -1)
    by_hand = (p.transpose(-1, -2) @ dout.abs()).unflatten(1, (2, 3)).sum(2)
    assert _value_terms(case, inputs, inputs.oracle_kwargs(case), None, dout) == pytest.approx(float(by_hand.max()), rel=1e-12)
    dv = (p.transpose(-1, -2) @ dout).unflatten(1, (2, 3)).sum(2)
    assert float(by_hand.max()) > float(dv.abs().max())  # the group's terms cancel: the sum of sizes is larger
