"""FP8 KV caches: the case fields, what an implementation receives, what the oracle reads, the bytes, the
declarations refused, and the quantisation's own error (reported, never failed). The known-bad kernels are in
tests/verifier/test_fp8_corpus.py."""

from __future__ import annotations

import json
from typing import Any

import pytest
import torch

from harness.case.attention import AttentionCase
from harness.contract.discovery import load_registry
from harness.contract.registry import make_implementation
from harness.errors import AttnbenchError, PluginError, UsageError
from harness.reference.flops import compulsory_bytes
from harness.reference.quantize import dequantize
from harness.reference.tensors import make_inputs
from harness.verify.checks import call
from harness.verify.quantisation import check_quantisation

DECODE = dict(batch=2, heads=8, kv_heads=2, tq=1, tk=37, d=16)


def fp8(layout: str = "head", kv: str = "float8_e4m3fn", **fields: Any) -> AttentionCase:
    return AttentionCase(**{**DECODE, "kv_dtype": kv, "kv_scales": layout, **fields})


def test_the_case_names_its_storage_and_scale_layout_and_reads_back_from_a_result_file() -> None:
    case = fp8("token", kv="float8_e5m2", cache_seqlens=(37, 4))
    assert case.id == "B2-H8/2-T1x37-d16-float32-kv=float8_e5m2/token-cache=37,4"
    static = fp8("tensor", kv_scale_values=((0.02,), (0.05,)))
    assert static.id == "B2-H8/2-T1x37-d16-float32-kv=float8_e4m3fn/tensor=0.02,0.05"
    per_head = fp8(kv_scale_values=((0.01, 0.02), (0.03, 0.04)))
    assert per_head.id.startswith("B2-H8/2-T1x37-d16-float32-kv=float8_e4m3fn/head=#")
    for each in (case, static, per_head):
        assert AttentionCase.from_dict(json.loads(json.dumps(each.to_dict()))) == each
    assert "kv_scales" not in AttentionCase(**DECODE, kv_dtype="bfloat16").to_dict()  # other cases unchanged


@pytest.mark.parametrize(("fields", "words"), [
    (dict(kv_scales=None), "needs kv_scales=, the layout of its float32 scales: 'tensor'"),
    (dict(kv_dtype="float8_e4m3fnuz"), "'float8_e4m3fnuz' is not a type a KV cache is stored in: choose one of"),
    (dict(kv_dtype="bfloat16"), "set kv_dtype to one of ('float8_e4m3fn', 'float8_e5m2'), or leave kv_scales unset"),
    (dict(kv_scales="channel"), "kv_scales 'channel' is not a scale layout: choose one of ('tensor', 'head', 'token')"),
    (dict(kv_scale_values=((0.1,), (0.2,))), "gives 1 K scale(s) for kv_scales='head' with kv_heads=2: give 2"),
    (dict(kv_scale_values=((0.1, 0.2), (0.2, 0.3, 0.4))), "gives 3 V scale(s)"),
    (dict(kv_scale_values=((0.1, float("nan")), (0.2, 0.3))), "holds nan among K's scales: a scale must be a finite number > 0"),
    (dict(kv_scale_values=((0.1, 0.2), (0.0, 0.3))), "holds 0.0 among V's scales"),
    (dict(kv_scale_values=((0.1, float("inf")), (0.2, 0.3))), "holds inf"),
    (dict(kv_scales="token", kv_scale_values=((0.1,), (0.2,))), "per-token scales are computed from each token"),
    (dict(kv_scale_values=(0.1, 0.2)), "must be two tuples, K's scales and V's"),
    (dict(grad=True), "forward-only"),
])
def test_a_bad_declaration_names_the_problem_and_the_fix(fields: dict[str, Any], words: str) -> None:
    with pytest.raises(UsageError, match="invalid case") as caught:
        fp8(**fields)
    assert words in str(caught.value) and isinstance(caught.value, AttnbenchError)  # the CLI's exit status 2


def _receiver(seen: dict[str, Any]) -> Any:
    def kernel(q, k, v, *, causal=False, mask=None, scale=None, cache_seqlens=None, block_table=None,  # type: ignore[no-untyped-def]
               k_scale=None, v_scale=None):
        seen.update(k=k, v=v, k_scale=k_scale, v_scale=v_scale)
        return torch.zeros(*q.shape[:3], v.shape[-1], dtype=q.dtype)

    return make_implementation("receiver", kernel, backend="torch", gqa=True, mask=True,
                               kv_dtypes=("float8_e4m3fn", "float8_e5m2"), kv_scales=("tensor", "head", "token"),
                               structures=("cache_seqlens", "paged"))


@pytest.mark.parametrize(("layout", "paged", "shape"), [
    ("tensor", False, (1,)), ("head", False, (2,)), ("token", False, (2, 2, 37)), ("token", True, (2 * 3 + 1, 2, 16)),
])
def test_the_implementation_receives_the_cache_in_fp8_and_scales_of_the_layouts_shape(
        layout: str, paged: bool, shape: tuple[int, ...]) -> None:
    case = fp8(layout, kv="float8_e5m2", **(dict(page_size=16, cache_seqlens=(37, 20)) if paged else {}))
    seen: dict[str, Any] = {}
    inputs = make_inputs(case, 1)
    call(_receiver(seen), case, inputs)
    assert seen["k"].dtype == seen["v"].dtype == torch.float8_e5m2
    assert seen["k"].shape[0] == (7 if paged else 2)  # a paged kernel gets the pools
    assert tuple(seen["k_scale"].shape) == tuple(seen["v_scale"].shape) == shape
    assert seen["k_scale"].dtype == torch.float32 and bool((seen["k_scale"] > 0).all())


@pytest.mark.parametrize("layout", ["tensor", "head", "token"])
def test_the_oracle_reads_the_dequantized_cache_and_the_scales_differ_across_groups(layout: str) -> None:
    inputs = make_inputs(fp8(layout), 2)
    quantized = inputs.quantized
    assert quantized is not None and quantized.k.exact is not None
    assert torch.equal(inputs.k64, dequantize(inputs.k, inputs.k_scale, layout))  # stored * scale, exactly
    error = (inputs.k64 - quantized.k.exact.double()).abs() / quantized.k.exact.double().abs().amax()
    assert float(error.max()) <= 2.0 ** -4  # e4m3fn: half of 2^-3 of the group's largest value at most
    if layout != "tensor":  # spread by up to 8x: a scale read from the wrong group is far off
        assert float(inputs.k_scale.max() / inputs.k_scale.min()) > 1.5
    static = make_inputs(fp8(kv_scale_values=((1e-3, 0.02), (0.05, 0.05))), 2).quantized
    assert static is not None and static.k.clipped > 0 and static.v.clipped == 0  # 1e-3 * 448 < |K|: saturates


def test_bytes_count_one_byte_a_value_and_the_scales() -> None:
    plain = AttentionCase(**DECODE)
    kv = 2 * 2 * 37 * 16 * 2  # K and V: B x Hkv x Tk x d each
    for layout, scales in (("tensor", 2 * 4), ("head", 2 * 2 * 4), ("token", 2 * 2 * 2 * 37 * 4)):
        assert compulsory_bytes(plain) - compulsory_bytes(fp8(layout)) == kv * (4 - 1) - scales


def test_an_implementation_that_does_not_declare_fp8_is_skipped_with_the_reason() -> None:
    registry = load_registry(entry_points=False)
    case = fp8("token")
    assert registry.get("numpy_naive").not_supported_reasons(case) == [
        "a float8_e4m3fn KV cache with float32 queries not supported (an FP8 cache: declare kv_dtypes=, kv_scales= "
        "and take k_scale=, v_scale=)"]
    assert registry.get("torch_sdpa").not_supported_reasons(case) == []
    head_only = make_implementation("head_only", lambda q, k, v, *, causal, mask, scale, k_scale=None, v_scale=None: q,
                                    backend="torch", gqa=True, kv_dtypes=("float8_e4m3fn",), kv_scales=("head",))
    assert head_only.not_supported_reasons(case) == ["token scales of an FP8 KV cache not supported (kv_scales: head)"]


def _kernel(q, k, v, *, causal=False, mask=None, scale=None):  # type: ignore[no-untyped-def]
    return q


@pytest.mark.parametrize(("fields", "words"), [
    (dict(kv_dtypes=("float8_e4m3fn",)), "declare the scale layouts taken too, kv_scales="),
    (dict(kv_scales=("head",)), "declare kv_dtypes= with some of ('float8_e4m3fn', 'float8_e5m2')"),
    (dict(kv_dtypes=("float8_e4m3fnuz",), kv_scales=("head",)), "unknown values ['float8_e4m3fnuz']"),
    (dict(kv_dtypes=("float8_e4m3fn",), kv_scales=("channel",)), "unknown values ['channel']"),
    (dict(kv_dtypes=("float8_e4m3fn",), kv_scales=("head",)), "no parameter `k_scale` (kv_scales= is declared)"),
])
def test_a_bad_fp8_declaration_fails_at_registration(fields: dict[str, Any], words: str) -> None:
    with pytest.raises(PluginError) as caught:
        make_implementation("bad", _kernel, backend="torch", **fields)
    assert words in str(caught.value)
    with pytest.raises(PluginError, match="NumPy has no FP8 type"):
        make_implementation("bad", lambda q, k, v, **kw: q, backend="numpy", kv_dtypes=("float8_e4m3fn",),
                            kv_scales=("head",))


def test_dequantize_refuses_a_scale_of_the_wrong_shape_or_a_nan() -> None:
    stored = torch.zeros(2, 3, 5, 4).to(torch.float8_e4m3fn)
    with pytest.raises(ValueError, match=r"a head scale of shape \(2,\) for a cache of shape \(2, 3, 5, 4\): expected \(3,\)"):
        dequantize(stored, torch.ones(2), "head")
    with pytest.raises(ValueError, match="every scale must be a finite number > 0"):
        dequantize(stored, torch.tensor([1.0, float("nan"), 1.0]), "head")
    with pytest.raises(ValueError, match="NumPy has no FP8 type"):
        make_inputs(fp8(), 0, backend="numpy")


def test_the_quantisation_check_measures_the_formats_error_and_never_fails() -> None:
    result = check_quantisation(fp8("token", cache_seqlens=(37, 3)))
    metrics = result.metrics
    assert result.status == "pass" and metrics["reported_only"] is True
    assert 0.005 < float(metrics["output_rel_l2"]) < 0.2  # e4m3fn: a few percent of the output
    assert float(metrics["times_bound"]) > 100  # far past what a float32 kernel is allowed: why the oracle dequantizes
    assert 0 < float(metrics["k_rel_l2"]) < 0.1 and float(metrics["clipped_share"]) == 0.0
