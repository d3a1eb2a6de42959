"""Modules like the models: grouped-query attention and a KV cache of earlier positions in the module contract."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from harness.contract.discovery import load_registry
from harness.contract.registry import make_implementation
from harness.errors import PluginError, UsageError
from harness.modules.cases import ModuleCase
from harness.modules.reference import reference_output
from harness.modules.weights import make_module_inputs
from harness.verify.modules import check_module_case, module_cases
from implementations.module_torch_mha import rope_torch

DECODE = ModuleCase(batch=2, seq=3, d_model=64, heads=8, kv_heads=2, causal=True, rope="rotate_half",
                    proj_bias=False, past=11, dtype="float64")


def decoder_module(*, head_map: str = "h // group", align: str = "bottom_right", rope_offset: bool = True,
                   use_cache: bool = True):  # type: ignore[no-untyped-def]
    """A Llama-style attention module from scratch, with one convention switchable to a wrong one."""

    def module(x, *, heads, weights, mask=None, causal=False, rope=None, kv_heads=None, past_key=None,
               past_value=None):  # type: ignore[no-untyped-def]
        b, t, d_model = x.shape
        d, hkv = d_model // heads, kv_heads or heads
        q, k, v = F.linear(x, weights.in_proj_weight, weights.in_proj_bias).split([d_model, hkv * d, hkv * d], -1)
        q = q.view(b, t, heads, d).transpose(1, 2)
        k, v = (y.view(b, t, hkv, d).transpose(1, 2) for y in (k, v))
        past = past_key.shape[2] if past_key is not None and use_cache else 0
        if rope:
            offset = past if rope_offset else 0
            q, k = rope_torch(q, rope, offset=offset), rope_torch(k, rope, offset=offset)
        if past:
            k, v = torch.cat([past_key, k], 2), torch.cat([past_value, v], 2)
        index = torch.arange(heads) // (heads // hkv) if head_map == "h // group" else torch.arange(heads) % hkv
        k, v = k[:, index], v[:, index]
        allowed = torch.ones(t, past + t, dtype=torch.bool).tril(past if align == "bottom_right" else 0)
        if not causal:
            allowed = torch.ones_like(allowed)
        if mask is not None:
            allowed = allowed & mask[:, None, None, -(past + t):]
        scores = (q @ k.transpose(-1, -2) / d ** 0.5).masked_fill(~allowed, float("-inf"))
        out = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d_model)
        return F.linear(out, weights.out_proj_weight, weights.out_proj_bias)

    return make_implementation("decoder", module, backend="torch", dtypes=("float64", "float32"), kind="module",
                               causal=True, mask=True, gqa=True,
                               layers=("mha",), rope=("rotate_half",), kv_cache=True)


def test_case_fields_ids_and_validation() -> None:
    assert DECODE.id == "module-mha-B2-T3-D64-H8/2-float64-causal-rope=rotate_half-past=11-nobias"
    assert (DECODE.keys, DECODE.kv_dim) == (14, 16)
    assert ModuleCase.from_dict(DECODE.to_dict()) == DECODE
    assert ModuleCase(heads=4).with_(heads=2).kv_heads == 2  # KV heads equal to the heads follow them
    with pytest.raises(UsageError, match="multiple of kv_heads"):
        ModuleCase(heads=4, kv_heads=3, d_model=32)
    with pytest.raises(UsageError, match="layer='mha' only"):
        ModuleCase(layer="encoder", past=4)


def test_inputs_carry_the_cache_and_a_grouped_projection() -> None:
    inputs = make_module_inputs(DECODE, seed=0)
    assert inputs.weights.in_proj_weight.shape == (64 + 2 * 16, 64)  # Q, then K and V of 2 heads x 8 dims
    assert inputs.past_key.shape == inputs.past_value.shape == (2, 2, 11, 8)
    kwargs = inputs.kwargs(DECODE)
    assert kwargs["kv_heads"] == 2 and kwargs["past_key"] is inputs.past_key
    assert "kv_heads" not in make_module_inputs(DECODE.with_(kv_heads=8, past=0), 0).kwargs(DECODE.with_(kv_heads=8, past=0))
    padded = make_module_inputs(DECODE.with_(mask="key_padding"), seed=1)
    assert padded.mask.shape == (2, 14)  # over the cached keys and the new ones


@pytest.mark.parametrize("case", [DECODE, DECODE.with_(seq=1, past=20, kv_heads=1, mask="key_padding"),
                                  DECODE.with_(past=0, seq=9), DECODE.with_(dtype="float32")])
def test_a_correct_decoder_passes(case: ModuleCase) -> None:
    results = check_module_case(decoder_module(), case, trials=2)
    assert {r.status for r in results} == {"pass"}, [r.reason for r in results]


@pytest.mark.parametrize(("wrong", "case"), [
    ({"head_map": "h % kv_heads"}, DECODE),          # a checkpoint from another head convention mixes heads
    ({"align": "top_left"}, DECODE),                 # causal from the first cached key: new tokens miss the cache
    ({"rope_offset": False}, DECODE),                # new tokens rotated as if at position 0
    ({"use_cache": False}, DECODE),                  # the cache ignored
])
def test_each_wrong_convention_fails(wrong: dict[str, object], case: ModuleCase) -> None:
    result = check_module_case(decoder_module(**wrong), case, trials=1)[0]  # type: ignore[arg-type]
    assert result.status == "fail", wrong


def test_the_reference_with_a_cache_equals_one_call_over_the_whole_sequence() -> None:
    """Prefill of past + seq tokens, then the last seq rows: the same as continuing from the cache of the first past."""
    whole = DECODE.with_(seq=14, past=0)
    inputs = make_module_inputs(whole, seed=3)
    full = reference_output(whole, inputs)
    w, x = inputs.weights64, inputs.x64
    k = F.linear(x, w.in_proj_weight[64:80], None).view(2, 14, 2, 8).transpose(1, 2)
    v = F.linear(x, w.in_proj_weight[80:96], None).view(2, 14, 2, 8).transpose(1, 2)
    k = rope_torch(k, "rotate_half")
    cont = make_module_inputs(DECODE, seed=3)
    cont = type(cont)(**{**cont.__dict__, "x64": x[:, 11:], "weights64": w, "past_key64": k[:, :, :11],
                         "past_value64": v[:, :, :11]})
    torch.testing.assert_close(reference_output(DECODE, cont), full[:, 11:], rtol=0, atol=1e-12)


def test_built_in_modules_declare_and_pass_gqa_and_the_cache() -> None:
    registry = load_registry([])
    for name in ("torch_mha", "numpy_mha", "torch_sdpa_mha"):
        impl = registry.get(name)
        cases = [c for c in module_cases(impl, "small") if c.past or c.kv_heads != c.heads]
        assert len(cases) >= 4
        for case in cases:
            assert not impl.not_supported_reasons(case), name
            assert {r.status for r in check_module_case(impl, case, 1)} == {"pass"}, (name, case.id)
    nn_mha = registry.get("nn_mha")
    reasons = " ".join(nn_mha.not_supported_reasons(DECODE.with_(rope="none")))
    assert "grouped-query attention not supported" in reasons and "KV cache" in reasons


def test_declarations_are_checked_against_the_signature() -> None:
    def no_cache(x, *, heads, weights, mask=None, causal=False, kv_heads=None):  # type: ignore[no-untyped-def]
        return x

    with pytest.raises(PluginError, match="past_key"):
        make_implementation("no_cache", no_cache, backend="torch", kind="module", kv_cache=True)

    def no_kv_heads(x, *, heads, weights, mask=None, causal=False):  # type: ignore[no-untyped-def]
        return x

    with pytest.raises(PluginError, match="kv_heads"):
        make_implementation("no_kv_heads", no_kv_heads, backend="torch", kind="module", gqa=True)
    with pytest.raises(PluginError, match="kv_cache"):
        make_implementation("bad", no_cache, backend="torch", kind="module", kv_cache="yes")
