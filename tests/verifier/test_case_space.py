"""The case space spans what models feed: logits at each dtype's edge, arrays laid out one by one, every mask form
at length, structures across calls, the commonest real shapes in quick. Small, real inputs; no timing."""

from __future__ import annotations

import pytest
import torch

from harness.case.attention import AttentionCase
from harness.contract.discovery import load_registry
from harness.contract.registry import Implementation
from harness.errors import UsageError
from harness.modules.cases import ModuleCase
from harness.reference.tensors import HUGE_LOGIT, make_inputs
from harness.verify.modules import module_cases
from harness.verify.pairwise import pairwise_cases
from harness.verify.properties import permutation
from harness.verify.restructured import other_structure
from harness.verify.suites import kernel_cases


@pytest.fixture(scope="module")
def sdpa() -> Implementation:
    return load_registry([], builtins=True, entry_points=False).get("torch_sdpa")


def _logits(case: AttentionCase) -> torch.Tensor:
    inputs = make_inputs(case, 1000)
    k = inputs.k64.repeat_interleave(case.heads // case.kv_heads, 1)
    return inputs.q64 @ k.transpose(-1, -2)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float64"])
def test_huge_logits_sit_at_the_edge_in_both_signs_and_leave_softmax_ordinary(dtype: str) -> None:
    case = AttentionCase(batch=2, heads=4, kv_heads=2, tq=9, tk=30, d=64, dtype=dtype, inputs="huge")
    scaled = _logits(case) * case.effective_scale
    assert float(scaled[..., 0, :].min()) > 0.9 * HUGE_LOGIT  # the first row far above
    assert float(scaled[..., 1, :].max()) < -0.9 * HUGE_LOGIT  # the second far below -5e4
    if dtype != "bfloat16":  # the offset is the same for every key of a row: the softmax is the randn one's
        spread = scaled.amax(-1) - scaled.amin(-1)
        assert float(spread.max()) < 60


def test_huge_logits_in_float16_overflow_before_the_scale_only() -> None:
    case = AttentionCase(heads=2, tq=9, tk=30, d=64, dtype="float16", inputs="huge")
    raw = _logits(case)
    assert float(raw.abs().amin(-1).max()) > 65504  # some row's every raw product is past float16
    assert float((raw * case.effective_scale).abs().max()) < 65504


def test_tiny_logits_are_tiny() -> None:
    assert float(_logits(AttentionCase(heads=2, tq=9, tk=30, d=64, inputs="tiny")).abs().max()) / 8 < 0.05


def test_first_block_masks_more_than_a_512_key_block_of_some_rows_and_keeps_a_key() -> None:
    mask = make_inputs(AttentionCase(batch=2, heads=2, tq=16, tk=1100, d=8, mask="first_block"), 1000).mask64
    assert mask is not None
    blocked = ~mask[..., :520].any(-1)
    assert bool(blocked[0, 0, 0]) and 0 < float(blocked.double().mean()) < 1
    assert bool(mask.any(-1).all())


def test_late_key_padding_pads_elements_other_than_0() -> None:
    mask = make_inputs(AttentionCase(batch=3, heads=2, tq=4, tk=1100, d=8, mask="key_padding_late"), 1000).mask64
    assert mask is not None and mask.shape == (3, 1, 1, 1100)
    assert not bool(mask[0].all()) and bool(mask[2].all())


def test_one_array_in_a_layout_of_its_own() -> None:
    case = AttentionCase(batch=2, heads=2, tq=5, tk=7, d=8, layouts=(("v", "transposed"),))
    inputs = make_inputs(case, 1000)
    assert inputs.k.is_contiguous() and not inputs.v.is_contiguous() and inputs.k.stride() != inputs.v.stride()
    assert case.id.endswith("lay=v:transposed")
    assert AttentionCase.from_dict(case.to_dict()) == case
    assert case.layout_of("k") == "contiguous" and case.layout_of("v") == "transposed"
    with pytest.raises(UsageError, match="layouts"):
        AttentionCase(layouts=(("w", "transposed"),))


def test_the_covering_array_crosses_every_new_axis(sdpa: Implementation) -> None:
    cases = pairwise_cases(sdpa, "quick", "cpu")
    assert {c.layouts[0][0] for c in cases if c.layouts} >= {"q", "k", "v", "dout", "mask", "bias"}
    assert {c.dtype for c in cases if c.inputs == "huge"} == set(sdpa.declared.dtypes)
    assert {c.mask for c in cases} >= {"first_block", "key_padding_late"}


def test_quick_holds_the_commonest_real_shapes(sdpa: Implementation) -> None:
    cases = kernel_cases(sdpa, "quick")
    for dtype in ("bfloat16", "float16"):
        assert any(c.dtype == dtype and c.d == 64 and c.causal and c.grad and c.kv_heads < c.heads for c in cases)
    assert any(c.grad and c.d > 128 and c.layout != "contiguous" for c in cases)
    assert any(c.mask == "key_padding" and c.mask_rank == "full" and c.tk > 1000 and c.batch > 2 for c in cases)
    assert any(c.mask == "first_block" and c.tk > 1024 for c in cases)
    assert any(c.cache_seqlens is not None and c.causal and c.causal_align == "top_left" and c.tq > 1 for c in cases)
    assert any(c.layout_of("k") != c.layout_of("v") for c in cases)


def test_a_second_structure_keeps_the_totals() -> None:
    packed = AttentionCase(heads=2, tq=20, tk=26, d=8, varlen=((3, 9), (17, 17)))
    other = other_structure(packed)
    assert other is not None and other.varlen != packed.varlen and (other.tq, other.tk) == (20, 26)
    one = other_structure(AttentionCase(heads=2, tq=20, tk=26, d=8, varlen=((20, 26),)))
    assert one is not None and one.varlen == ((10, 13), (10, 13))
    cached = AttentionCase(batch=2, heads=2, tq=1, tk=26, d=8, cache_seqlens=(26, 26))
    relengthed = other_structure(cached)
    assert relengthed is not None and relengthed.cache_seqlens != (26, 26)
    assert other_structure(AttentionCase()) is None


def test_a_property_bound_survives_a_baseline_that_overflows(sdpa: Implementation) -> None:
    case = AttentionCase(heads=2, tq=16, tk=40, d=64, dtype="float16", inputs="huge")  # base: fp16 Q K^T = inf
    result = permutation(sdpa, case)
    assert result.status == "pass", result.reason


def test_modules_run_half_precision_past_a_bf16_rope_table() -> None:
    impl = load_registry([], builtins=True, entry_points=False).get("torch_mha")
    cases = [c for c in module_cases(impl, "quick") if isinstance(c, ModuleCase)]
    assert any(c.dtype == "bfloat16" and c.rope != "none" and c.seq > 256 for c in cases)
    assert any(c.dtype == "float16" and c.rope != "none" and c.seq > 256 for c in cases)
    assert any(c.bias == "alibi" and c.heads & (c.heads - 1) for c in cases)  # not a power of two


def test_quick_reaches_every_declared_2025_feature_in_every_declared_dtype() -> None:
    """Sinks, soft-capping and dv != d each meet every declared dtype, sinks without GQA, and sinks with soft-capping."""
    from harness import register
    from harness.verify.pairwise import reach

    impl = register("reach_probe", backend="torch", dtypes=("float32", "bfloat16", "float16"), causal=True,
                    gqa=True, grad=True, sinks=True, softcap=True, value_dim=True)(
        lambda q, k, v, *, causal=False, mask=None, scale=None, sinks=None, softcap=None: v).__attnbench__
    cases = [c for c in kernel_cases(impl, "quick") if not impl.declared_gaps(c)]
    counts = reach(impl, cases)
    for feature in ("sinks", "softcap", "value_dim"):
        assert set(counts[feature]) == {"float32", "bfloat16", "float16"}, (feature, counts[feature])
    assert any(c.sinks and c.kv_heads == c.heads and not c.causal for c in cases)
    assert any(c.sinks and c.softcap is not None for c in cases)
    assert any(c.dv == 128 and c.d == 192 and c.grad for c in cases)


def test_a_declared_capability_no_case_exercises_is_named() -> None:
    """The coverage check's question, on cases that leave one declared feature out: it names exactly that one."""
    from harness import register
    from harness.verify.pairwise import unreached

    impl = register("unreached_probe", backend="torch", causal=True, sinks=True, softcap=True)(
        lambda q, k, v, *, causal=False, mask=None, scale=None, sinks=None, softcap=None: v).__attnbench__
    cases = [c for c in kernel_cases(impl, "quick") if not impl.declared_gaps(c)]
    assert unreached(impl, cases) == []
    assert unreached(impl, [c for c in cases if not c.sinks]) == ["sinks"]
    assert unreached(impl, []) == ["causal", "sinks", "softcap"]
    # in quick and full each dtype counts: sinks tested in float32 alone leave a bfloat16 kernel's sinks untested
    two = register("unreached_dtypes", backend="torch", dtypes=("float32", "bfloat16"), sinks=True)(
        lambda q, k, v, *, causal=False, mask=None, scale=None, sinks=None: v).__attnbench__
    cases = [c for c in kernel_cases(two, "quick") if not two.declared_gaps(c)]
    assert unreached(two, cases, by_dtype=True) == []
    float32_sinks = [c for c in cases if not (c.sinks and c.dtype == "bfloat16")]
    assert unreached(two, float32_sinks) == [] and unreached(two, float32_sinks, by_dtype=True) == ["sinks in bfloat16"]


@pytest.mark.slow  # a verify run
def test_a_run_fails_a_declared_capability_its_suite_never_offers(tmp_path, monkeypatch) -> None:
    """The run's side of the question above: with causal cases counted as exercising nothing (as a suite without
    them would be), numpy_naive's run gets one failing coverage cell that names causal."""
    import harness.verify.pairwise as pairwise
    from harness.results import read_run
    from harness.verify import VerifySettings
    from harness.verify import run as verify

    monkeypatch.setitem(pairwise.REACH, "causal", lambda case: False)
    verify(VerifySettings(suite="quick", only=("numpy_naive",), progress=False, trials=1), tmp_path / "v.json")
    (cell,) = [c for c in read_run(tmp_path / "v.json").verify_cells() if c.check == "coverage"]
    assert cell.status.value == "fail" and (cell.reason or "").startswith("declares causal,"), cell.reason


def test_the_search_gives_a_key_padding_kernel_only_masks_it_takes() -> None:
    """A kernel that takes (B, Tk) key-padding masks gets the masks that reduce to them, and no structure it would
    need folded into a full mask: every drawn case runs (none rejected), and each kind of key padding is drawn."""
    from hypothesis import HealthCheck, given, settings

    from harness import register
    from harness.contract.conventions import KEY_PADDING_MASKS, Conventions
    from harness.verify.fuzz import case_strategy

    impl = register("key_padding_probe", backend="torch", causal=True, mask=True,
                    conventions=Conventions(mask_kind="key_padding"))(
        lambda q, k, v, *, causal=False, mask=None, scale=None: v).__attnbench__
    masks: set[str] = set()

    @settings(max_examples=150, database=None, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
    @given(case=case_strategy(impl))
    def drawn(case: AttentionCase) -> None:
        assert not impl.declared_gaps(case), (case.id, impl.declared_gaps(case))
        masks.add(case.mask)

    drawn()
    assert set(KEY_PADDING_MASKS) <= masks


def test_the_covering_array_gives_a_key_padding_kernel_only_masks_it_takes() -> None:
    """The pairwise rows for a kernel that takes (B, Tk) key-padding masks: every row runs (no mask of another
    shape, no structure that would have to be folded into a full mask), and each kind of key padding is in one."""
    from harness import register
    from harness.contract.conventions import KEY_PADDING_MASKS, Conventions
    from harness.verify.pairwise import pairwise_cases

    impl = register("key_padding_rows", backend="torch", causal=True, mask=True, gqa=True,
                    conventions=Conventions(mask_kind="key_padding"))(
        lambda q, k, v, *, causal=False, mask=None, scale=None: v).__attnbench__
    cases = pairwise_cases(impl, "quick", "cpu")
    assert cases and all(not impl.declared_gaps(c) for c in cases), [(c.id, impl.declared_gaps(c)) for c in cases
                                                                      if impl.declared_gaps(c)][:3]
    assert set(KEY_PADDING_MASKS) <= {c.mask for c in cases}
