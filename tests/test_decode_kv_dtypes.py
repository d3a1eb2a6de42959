"""KV caches stored in bfloat16 or float16 beside fp32 queries: the case field, the rule's baseline for it,
tiled_decode on every instruction-set tier this CPU has, and decode_numpy's memory in a square prefill."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
import torch

from harness.case.attention import AttentionCase
from harness.contract.discovery import load_registry
from harness.errors import UsageError
from harness.reference.flops import compulsory_bytes
from harness.reference.tensors import make_inputs, to_float64
from harness.reference.tolerance import OUTPUT_M, compare
from harness.verify.checks import oracle_and_base

pytestmark = pytest.mark.tier  # results depend on the CPU's tier: CI runs it again capped (scripts/at_tier.py)

REGISTRY = load_registry(entry_points=False)

MIXED = [  # tiny decode steps: contiguous, ragged (one cache empty), paged (a page size that does not divide Tk)
    dict(batch=2, heads=8, kv_heads=2, tq=1, tk=77, d=64),
    dict(batch=3, heads=8, kv_heads=1, tq=4, tk=77, d=40, cache_seqlens=(77, 0, 5), causal=True,
         causal_align="bottom_right"),
    dict(batch=2, heads=4, kv_heads=2, tq=2, tk=77, d=72, cache_seqlens=(76, 30), page_size=16),
]


def _verdict(case: AttentionCase, out: torch.Tensor, seed: int = 3) -> tuple[bool, str | None]:
    inputs = make_inputs(case, seed)
    oracle, base = oracle_and_base(case, inputs)
    verdict = compare(to_float64(out), oracle, base, dtype=case.dtype, m=OUTPUT_M)
    return verdict.ok, verdict.reason


def test_ids_and_result_dicts_are_unchanged_when_kv_dtype_is_unset() -> None:
    plain = AttentionCase(batch=2, heads=8, kv_heads=2, tq=1, tk=61, d=32, cache_seqlens=(61, 3))
    assert plain.id == "B2-H8/2-T1x61-d32-float32-cache=61,3"
    assert "kv_dtype" not in plain.to_dict()
    mixed = plain.with_(kv_dtype="bfloat16")
    assert mixed.id == "B2-H8/2-T1x61-d32-float32-kv=bfloat16-cache=61,3"
    assert AttentionCase.from_dict(mixed.to_dict()) == mixed and mixed.to_dict()["kv_dtype"] == "bfloat16"
    for bad in (dict(kv_dtype="float32"), dict(kv_dtype="int8"), dict(kv_dtype="float16", grad=True)):
        with pytest.raises(UsageError):
            plain.with_(**bad)


def test_inputs_are_stored_in_the_cache_dtype_and_bytes_count_them() -> None:
    case = AttentionCase(batch=2, heads=4, kv_heads=2, tq=1, tk=33, d=16, kv_dtype="float16", page_size=8)
    inputs = make_inputs(case, 0)
    assert inputs.q.dtype == torch.float32 and inputs.k.dtype == inputs.v_pages.dtype == torch.float16
    assert torch.equal(inputs.k64, inputs.k.double())  # the oracle reads the stored (rounded) values
    plain = case.with_(kv_dtype=None)
    kv = 2 * 2 * 2 * 33 * 16  # K and V: B x Hkv x Tk x d each
    assert compulsory_bytes(plain) - compulsory_bytes(case) == kv * (4 - 2)


def test_only_implementations_declaring_the_cache_dtype_run_mixed_cases() -> None:
    case = AttentionCase(batch=2, heads=4, kv_heads=2, tq=1, tk=33, d=16, kv_dtype="bfloat16")
    decode = REGISTRY.get("tiled_decode")
    assert decode.capabilities()["kv_dtypes"] == ["float32", "bfloat16", "float16", "float8_e4m3fn", "float8_e5m2"]
    assert REGISTRY.get("torch_sdpa").capabilities()["kv_dtypes"] == ["float8_e4m3fn", "float8_e5m2"]  # FP8 only
    assert REGISTRY.get("torch_sdpa").not_supported_reasons(case) == [
        "a bfloat16 KV cache with float32 queries not supported (KV caches: float8_e4m3fn, float8_e5m2)"]
    assert REGISTRY.get("numpy_naive").not_supported_reasons(case) == [
        "a bfloat16 KV cache with float32 queries not supported"]
    from implementations.tiled_decode import available

    built = available()  # None where a build runs here; else (no build, or a tier cap below it) the only reason
    assert decode.not_supported_reasons(case) == ([] if built is None else [built])


@pytest.mark.parametrize("kv", ["bfloat16", "float16"])
def test_the_rule_rejects_a_wrong_conversion(kv: str) -> None:
    """The baseline of a mixed case is fp32 arithmetic on the stored K and V: a kernel that computes in the
    cache's dtype, or converts the cache through a narrower type, is orders of magnitude past it."""
    case = AttentionCase(batch=2, heads=8, kv_heads=2, tq=1, tk=77, d=64, kv_dtype=kv)
    inputs = make_inputs(case, 3)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    right = sdpa(inputs.q, inputs.k.float(), inputs.v.float(), enable_gqa=True)
    assert _verdict(case, right) == (True, None)
    low = getattr(torch, kv)
    in_cache_dtype = sdpa(inputs.q.to(low), inputs.k, inputs.v, enable_gqa=True).float()
    # fp16 through bf16 drops 3 mantissa bits; bf16 read as fp16 (the other conversion instruction) is garbage
    misread = [x.to(torch.bfloat16).float() if kv == "float16" else x.view(torch.float16).float().nan_to_num()
               for x in (inputs.k, inputs.v)]
    for wrong in (in_cache_dtype, sdpa(inputs.q, *misread, enable_gqa=True)):
        ok, reason = _verdict(case, wrong)
        assert not ok and reason is not None and "baseline" in reason


@pytest.mark.parametrize("fields", MIXED, ids=lambda f: AttentionCase(**f).id)
def test_tiled_decode_reads_bf16_and_fp16_caches_on_every_tier(fields: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    from implementations import tiled_decode as module

    impl = REGISTRY.get("tiled_decode")
    if module.available():  # no build, or a tier cap below every build
        pytest.skip(str(module.available()))
    tiers = module.tiers()
    assert tiers[0] == "avx2"
    for kv in ("bfloat16", "float16", None):
        for dtype in ("float32", "bfloat16"):
            if kv == dtype:
                continue
            case = AttentionCase(**fields, dtype=dtype, kv_dtype=kv)
            inputs = make_inputs(case, 3)
            for isa in tiers:
                monkeypatch.setenv(module.FORCE_ISA, isa)
                assert module.use_isa() == isa
                out = impl(*inputs.arrays(impl.declared.structures), **inputs.kwargs(case, impl.declared.structures))
                assert out.dtype == inputs.q.dtype
                ok, reason = _verdict(case, out)
                assert ok, (isa, case.id, reason)


def test_decode_numpy_memory_is_linear_in_a_square_prefill() -> None:
    """tracemalloc sees NumPy's allocations: the peak while computing grows as T (chunks of query rows),
    not as T^2 (all T rows against a quarter of the keys)."""
    impl = REGISTRY.get("decode_numpy")
    peaks = []
    for t in (256, 512, 1024):
        case = AttentionCase(heads=1, tq=t, d=16, causal=True)
        inputs = make_inputs(case, 0, "numpy")
        tracemalloc.start()
        out = impl(inputs.q, inputs.k, inputs.v, causal=True)
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
        assert isinstance(out, np.ndarray) and out.shape == (1, 1, t, 16)
    growth = [b / a for a, b in zip(peaks, peaks[1:])]
    assert all(1.5 < g < 2.6 for g in growth), (peaks, growth)  # quadratic would be 4 per doubling


def test_the_lower_tier_is_chosen_only_when_every_reading_says_so() -> None:
    from implementations.tiled_decode import TIER_MARGIN, narrow_wins

    assert narrow_wins([50.0, 52.0], [40.0, 41.0])  # Zen 4-like: the 256-bit loops clearly faster in cache
    assert not narrow_wins([37.0, 38.0], [64.0, 65.0])  # Zen 5-like: the 512-bit loops faster
    assert not narrow_wins([50.0, 40.0], [40.0, 41.0])  # one reading disagrees: the highest tier stays
    assert not narrow_wins([TIER_MARGIN * 40.0, 60.0], [40.0, 40.0])  # within the margin
    assert not narrow_wins([50.0, 52.0], [0.0, 0.0]) and not narrow_wins([], [40.0])  # unmeasured decides nothing


def test_the_default_tier_is_one_the_cpu_has_and_float32_takes_the_highest(monkeypatch: pytest.MonkeyPatch) -> None:
    from implementations import tiled_decode as module

    if module.available():
        pytest.skip(module.available())
    monkeypatch.delenv(module.FORCE_ISA, raising=False)
    have = module.tiers()
    assert module.default_tier(torch.float32) == have[-1] == module.default_tier(None)
    for kv in (torch.bfloat16, torch.float16):
        assert module.default_tier(kv) in have
        assert module.use_isa(kv_dtype=kv) == module.default_tier(kv)  # measured once: the same answer again


@pytest.mark.parametrize("fields", MIXED, ids=lambda f: AttentionCase(**f).id)
def test_tiled_decode_reads_fp8_caches_in_its_loops_on_every_tier(fields: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    """e4m3fn and e5m2 caches with per-tensor, per-head and per-token scales, contiguous, ragged and paged: every
    tier's loops convert the bytes themselves and pass the rule against float64 on the dequantized values."""
    from implementations import tiled_decode as module

    impl = REGISTRY.get("tiled_decode")
    if module.available():
        pytest.skip(str(module.available()))
    for kv, scales in (("float8_e4m3fn", "token"), ("float8_e4m3fn", "tensor"), ("float8_e5m2", "head")):
        case = AttentionCase(**fields, kv_dtype=kv, kv_scales=scales)
        inputs = make_inputs(case, 3)
        for isa in module.tiers():
            monkeypatch.setenv(module.FORCE_ISA, isa)
            out = impl(*inputs.arrays(impl.declared.structures), **inputs.kwargs(case, impl.declared.structures))
            ok, reason = _verdict(case, out)
            assert ok, (isa, case.id, reason)


def test_an_fp8_nan_in_the_cache_reaches_the_output_on_every_tier(monkeypatch: pytest.MonkeyPatch) -> None:
    """e4m3fn's NaN (S.1111.111) is no finite value in the loops' float16 reading: a NaN in a V row the query
    attends makes its output NaN, as dequantizing first would."""
    from implementations import tiled_decode as module

    if module.available():
        pytest.skip(str(module.available()))
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(1, 2, 1, 64, generator=gen)
    k, v = (torch.randn(1, 1, 40, 64, generator=gen).to(torch.float8_e4m3fn) for _ in range(2))
    v[0, 0, 7, 5] = float("nan")
    for isa in module.tiers():
        monkeypatch.setenv(module.FORCE_ISA, isa)
        out = module.decode_attention(q, k, v, k_scale=torch.ones(1), v_scale=torch.ones(1))
        assert torch.isnan(out[..., 5]).all() and not torch.isnan(out[..., 4]).any(), isa
