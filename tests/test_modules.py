"""Module-level verification: the built-in modules pass against PyTorch's own modules, wrong modules
are rejected, kernels lift into the module suite, and the worked 4x3 example holds."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from harness.contract.discovery import load_registry
from harness.contract.registry import Implementation, make_implementation
from harness.errors import PluginError, UsageError
from harness.modules.cases import ModuleCase
from harness.modules.lift import lift
from harness.modules.reference import composed_mha, reference_output
from harness.modules.weights import MultiheadWeights, make_module_inputs
from harness.reference.oracle import reference_attention
from harness.verify.modules import check_module_case, module_cases
from implementations.module_numpy_encoder import layer_norm
from implementations.module_numpy_mha import linear, numpy_multihead_attention, rope_numpy, softmax_attention

REGISTRY = load_registry()
MODULES = [impl for impl in REGISTRY if impl.declared.kind == "module"]
CLASSIC = ModuleCase(batch=2, seq=100, d_model=64, heads=4, dtype="float32")


def statuses(results: list[dict]) -> dict[str, str]:
    return {r["check"]: r["status"] for r in results}


def test_worked_example_4x3() -> None:
    q = torch.tensor([[1, 0, 1], [0, 1, 1], [1, 1, 0], [0, 0, 1]], dtype=torch.float64)
    k = torch.tensor([[1, 1, 0], [0, 1, 1], [1, 0, 1], [1, 0, 0]], dtype=torch.float64)
    v = torch.tensor([[0, 1], [1, 0], [1, 1], [0, 0]], dtype=torch.float64)
    weights = torch.softmax(q @ k.T / 3 ** 0.5, dim=-1)
    expected_weights = [[0.2091, 0.2091, 0.3726, 0.2091], [0.2303, 0.4102, 0.2303, 0.1293],
                        [0.3726, 0.2091, 0.2091, 0.2091], [0.1798, 0.3202, 0.3202, 0.1798]]
    assert weights.numpy().round(4).tolist() == expected_weights
    torch.testing.assert_close(weights.sum(-1), torch.ones(4, dtype=torch.float64), rtol=0, atol=1e-15)
    out = reference_attention(q[None, None], k[None, None], v[None, None])[0, 0]
    assert out.numpy().round(4).tolist() == [[0.5817, 0.5817], [0.6405, 0.4605], [0.4183, 0.5817], [0.6405, 0.5]]
    torch.testing.assert_close(out, weights @ v, rtol=0, atol=1e-15)


def test_module_case_id_round_trip_and_validation() -> None:
    case = CLASSIC.with_(causal=True, mask="key_padding", rope="interleaved")
    assert case.id == "module-mha-B2-T100-D64-H4-float32-causal-mask=key_padding-rope=interleaved"
    assert ModuleCase.from_dict(json.loads(json.dumps(case.to_dict()))) == case
    assert case.kind == "module" and case.kv_heads == case.heads and not case.grad
    assert ModuleCase(layer="encoder", norm_first=True).id.startswith("module-preln-")
    with pytest.raises(UsageError, match="multiple of heads"):
        ModuleCase(d_model=30, heads=4)
    with pytest.raises(UsageError, match="layer='mha' only"):
        ModuleCase(layer="encoder", rope="rotate_half")


def test_capabilities_skip_what_a_module_did_not_declare() -> None:
    nn_mha, numpy_encoder = REGISTRY.get("nn_mha"), REGISTRY.get("numpy_encoder")
    assert nn_mha.not_supported_reasons(CLASSIC) == []
    rope_reasons = nn_mha.not_supported_reasons(CLASSIC.with_(rope="rotate_half"))
    assert "RoPE convention 'rotate_half' not supported" in rope_reasons[0]
    assert "layer 'mha' not implemented" in numpy_encoder.not_supported_reasons(CLASSIC)[0]
    assert "a kernel implementation" in REGISTRY.get("torch_eager").not_supported_reasons(CLASSIC)[0]
    assert all(c.layer == "encoder" for c in module_cases(numpy_encoder, "quick"))


def test_the_reference_composition_equals_nn_multihead_attention() -> None:
    case = CLASSIC.with_(dtype="float64", causal=True, mask="key_padding", bias="alibi")
    inputs = make_module_inputs(case, 0)
    composed = composed_mha(case, inputs.x64, inputs.weights64, inputs.mask64, inputs.bias64, exact=True)
    assert (composed - reference_output(case, inputs)).abs().max() < 1e-13


@pytest.mark.parametrize("impl", MODULES, ids=lambda impl: impl.name)
def test_built_in_modules_pass_the_small_suite(impl: Implementation) -> None:
    for case in module_cases(impl, "small"):
        if impl.not_supported_reasons(case):
            continue
        for result in check_module_case(impl, case, trials=1):
            assert result["status"] == "pass", (case.id, result)


def test_numpy_against_nn_multihead_attention_classic_figure() -> None:
    """The classic comparison: float32, T = 100, d_model = 64; about 1e-6 (PyTorch's own float32 error)."""
    result = check_module_case(REGISTRY.get("numpy_mha"), CLASSIC, trials=2)[0]
    assert result["status"] == "pass"
    assert 1e-8 < result["metrics"]["max_abs_err"] < 5e-6
    print(f"numpy_mha vs nn.MultiheadAttention float32 T100 D64: max|err| {result['metrics']['max_abs_err']:.2e}, "
          f"nn.MultiheadAttention float32's own {result['metrics']['base_err']:.2e}")


# Deliberately wrong modules: each must be rejected.

def swapped_qk(x, *, heads, weights, mask=None, causal=False):
    """Reads K from rows [0:D] and Q from [D:2D] of the packed in_proj_weight."""
    d = x.shape[-1]
    w, bias = weights.in_proj_weight, weights.in_proj_bias
    swapped = MultiheadWeights(np.concatenate([w[d:2 * d], w[:d], w[2 * d:]]),
                               np.concatenate([bias[d:2 * d], bias[:d], bias[2 * d:]]),
                               weights.out_proj_weight, weights.out_proj_bias)
    return numpy_multihead_attention(x, heads=heads, weights=swapped, mask=mask, causal=causal)


def layer_norm_over_time(x, *, heads, weights, mask=None, causal=False):
    """Post-LN encoder layer whose LayerNorms normalise over the sequence axis instead of the features."""
    def wrong_norm(y, w, b):
        mean, var = y.mean(axis=-2, keepdims=True), y.var(axis=-2, keepdims=True)
        return (y - mean) / np.sqrt(var + y.dtype.type(weights.eps)) * w + b

    attn = numpy_multihead_attention(x, heads=heads, weights=weights.self_attn, mask=mask, causal=causal)
    x = wrong_norm(x + attn, weights.norm1_weight, weights.norm1_bias)
    ff = linear(np.maximum(linear(x, weights.linear1_weight, weights.linear1_bias), 0),
                weights.linear2_weight, weights.linear2_bias)
    return wrong_norm(x + ff, weights.norm2_weight, weights.norm2_bias)


def inverted_mask(x, *, heads, weights, mask=None, causal=False):
    """nn.MultiheadAttention handed attnbench's mask as key_padding_mask, whose True means *ignore*."""
    mha = torch.nn.MultiheadAttention(x.shape[-1], heads, batch_first=True, dtype=x.dtype)
    weights.load_into(mha)
    with torch.no_grad():
        return mha(x, x, x, key_padding_mask=mask, need_weights=False)[0]


def causal_upside_down(x, *, heads, weights, mask=None, causal=False):
    """Causal masking that hides the past instead of the future (tril/triu confusion)."""
    b, t, d = x.shape
    q, k, v = (y.reshape(b, t, heads, -1).transpose(0, 2, 1, 3)
               for y in np.split(linear(x, weights.in_proj_weight, weights.in_proj_bias), 3, axis=-1))
    allowed = np.triu(np.ones((t, t), dtype=bool))[None, None] if causal else None
    out = softmax_attention(q, k, v, allowed, None).transpose(0, 2, 1, 3).reshape(b, t, d)
    return linear(out, weights.out_proj_weight, weights.out_proj_bias)


WRONG = [
    ("swapped_qk", swapped_qk, dict(backend="numpy"), CLASSIC),
    ("layer_norm_over_time", layer_norm_over_time, dict(backend="numpy", layers=("encoder",)),
     ModuleCase(layer="encoder", seq=33, d_model=32, heads=4)),
    ("inverted_mask", inverted_mask, dict(backend="torch", mask=True), CLASSIC.with_(mask="key_padding")),
    ("causal_upside_down", causal_upside_down, dict(backend="numpy", causal=True), CLASSIC.with_(causal=True)),
]


@pytest.mark.parametrize("name, fn, keywords, case", WRONG, ids=[w[0] for w in WRONG])
def test_wrong_modules_are_rejected(name, fn, keywords, case) -> None:
    impl = make_implementation(name, fn, kind="module", dtypes=("float32", "float64"), **keywords)
    assert impl.not_supported_reasons(case) == []
    result = check_module_case(impl, case, trials=1)[0]
    assert result["status"] == "fail", result
    assert result["metrics"]["max_abs_err"] > 1e-2, result  # off by O(1), not by rounding


def test_a_wrong_encoder_is_not_rescued_by_the_right_attention() -> None:
    """The right layer norm over the wrong axis is the only difference from numpy_encoder, which passes."""
    case = ModuleCase(layer="encoder", seq=33, d_model=32, heads=4)
    assert check_module_case(REGISTRY.get("numpy_encoder"), case)[0]["status"] == "pass"
    x = np.random.default_rng(0).standard_normal((2, 5, 8)).astype(np.float32)
    assert np.allclose(layer_norm(x, np.ones(8, np.float32), np.zeros(8, np.float32), 1e-5).mean(-1), 0, atol=1e-6)


def test_an_exception_is_an_error_and_a_wrong_dtype_a_failure() -> None:
    def raises(x, **kwargs):
        raise RuntimeError("boom")

    def upcasts(x, **kwargs):
        return numpy_multihead_attention(x, **kwargs).astype(np.float64)

    error = check_module_case(make_implementation("raises", raises, backend="numpy", kind="module"), CLASSIC)[0]
    assert error["status"] == "error" and "RuntimeError: boom" in error["reason"]
    fail = check_module_case(make_implementation("upcasts", upcasts, backend="numpy", kind="module"), CLASSIC)[0]
    assert fail["status"] == "fail" and "float64" in fail["reason"]


def test_a_user_kernel_lifts_into_the_module_suite() -> None:
    def my_kernel(q, k, v, *, causal=False, mask=None, scale=None):
        return reference_attention(q, k, v, causal=causal, mask=mask, scale=scale).to(q.dtype)

    kernel = make_implementation("my_kernel", my_kernel, backend="torch", causal=True, mask=True)
    lifted = lift(kernel)
    assert lifted.name == "my_kernel_mha" and lifted.declared.kind == "module"
    assert "test_modules.py" in lifted.source and "(lifted as my_kernel_mha)" in lifted.source
    case = CLASSIC.with_(causal=True, mask="key_padding", rope="rotate_half")
    assert lifted.not_supported_reasons(case) == []
    assert statuses(check_module_case(lifted, case)) == {"output": "pass", "property:mask": "pass"}
    assert "additive bias" in lifted.not_supported_reasons(CLASSIC.with_(bias="alibi"))[0]
    with pytest.raises(PluginError, match="only kernels"):
        lift(lifted)


def test_a_lifted_kernel_that_reads_the_wrong_head_is_rejected() -> None:
    def shifted_heads(q, k, v, *, causal=False, mask=None, scale=None):
        return reference_attention(q, k.roll(1, dims=1), v, causal=causal, mask=mask).to(q.dtype)

    lifted = lift(make_implementation("shifted", shifted_heads, backend="torch"))
    assert check_module_case(lifted, CLASSIC)[0]["status"] == "fail"


def test_rope_convention_mix_up_is_rejected() -> None:
    def wrong_rope(x, *, heads, weights, mask=None, causal=False, bias=None, rope=None):
        other = {"rotate_half": "interleaved", "interleaved": "rotate_half"}[rope]
        return numpy_multihead_attention(x, heads=heads, weights=weights, rope=other)

    impl = make_implementation("wrong_rope", wrong_rope, backend="numpy", kind="module",
                               rope=("rotate_half", "interleaved"))
    assert check_module_case(impl, CLASSIC.with_(rope="rotate_half"))[0]["status"] == "fail"
    assert rope_numpy(np.zeros((1, 1, 3, 4), np.float32), "interleaved").dtype == np.float32


def test_suites_have_the_documented_sizes() -> None:
    numpy_mha = REGISTRY.get("numpy_mha")
    small, quick, full = (module_cases(numpy_mha, s) for s in ("small", "quick", "full"))
    assert len(small) < len(quick) < len(full)
    assert CLASSIC in quick and CLASSIC.with_(dtype="float64") in quick
    with pytest.raises(UsageError, match="unknown suite"):
        module_cases(numpy_mha, "huge")
