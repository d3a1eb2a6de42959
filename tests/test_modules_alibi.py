"""Modules that compute their own ALiBi: the standard slopes for every head count, the declaration, what the
module is handed, and a failure that names the positional bias and the heads whose slope is wrong."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from harness.case.positional import alibi_bias, alibi_slopes
from harness.contract.registry import make_implementation, register_module
from harness.errors import PluginError
from harness.modules.cases import ModuleCase
from harness.modules.weights import make_module_inputs
from harness.verify.modules import check_module_case, module_cases

BIAS_HEADS = ModuleCase(batch=2, seq=40, d_model=48, heads=6, bias="alibi", causal=True, dtype="float64")


def _press_slopes(n: int) -> list[float]:
    """ALiBi's reference code (Press et al., ``get_slopes``), recursive as published."""
    def power_of_2(m: int) -> list[float]:
        start = 2 ** (-(2 ** -(math.log2(m) - 3)))
        return [start * start ** i for i in range(m)]

    if math.log2(n).is_integer():
        return power_of_2(n)
    closest = 2 ** math.floor(math.log2(n))
    return power_of_2(closest) + _press_slopes(2 * closest)[0::2][: n - closest]


@pytest.mark.parametrize("heads", [1, 2, 3, 5, 6, 7, 8, 12, 20, 24, 40, 64, 96])
def test_alibi_slopes_are_the_reference_codes_for_every_head_count(heads: int) -> None:
    torch.testing.assert_close(alibi_slopes(heads), torch.tensor(_press_slopes(heads), dtype=torch.float64),
                               rtol=1e-14, atol=0)


def test_six_heads_take_four_slopes_then_every_other_of_eight() -> None:
    assert alibi_slopes(6).tolist() == [2.0 ** -2, 2.0 ** -4, 2.0 ** -6, 2.0 ** -8, 2.0 ** -1, 2.0 ** -3]
    with pytest.raises(ValueError, match="at least one head"):
        alibi_slopes(0)


def _attention(x, heads, weights, mask, causal, slopes):
    """Multi-head attention (float64 arithmetic) adding -slope_h |i - j| computed here from ``slopes``."""
    b, t, d_model = x.shape
    q, k, v = torch.nn.functional.linear(x, weights.in_proj_weight, weights.in_proj_bias).chunk(3, dim=-1)
    q, k, v = (y.reshape(b, t, heads, -1).transpose(1, 2).double() for y in (q, k, v))
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    distance = (torch.arange(t)[:, None] - torch.arange(t)[None, :]).abs().double()
    scores = scores - slopes.double()[:, None, None] * distance
    allowed = torch.ones(t, t, dtype=torch.bool).tril() if causal else torch.ones(t, t, dtype=torch.bool)
    if mask is not None:
        allowed = allowed & mask[:, None, None, :]
    out = torch.softmax(scores.masked_fill(~allowed, float("-inf")), -1) @ v
    out = out.to(x.dtype).transpose(1, 2).reshape(b, t, d_model)
    return torch.nn.functional.linear(out, weights.out_proj_weight, weights.out_proj_bias)


def _own_alibi(slopes_of, seen: list[dict] | None = None):
    def module(x, *, heads, weights, mask=None, causal=False, positional_bias=None, **rest):
        if seen is not None:
            seen.append({"positional_bias": positional_bias, **rest})
        slopes = slopes_of(heads) if positional_bias == "alibi" else torch.zeros(heads)
        return _attention(x, heads, weights, mask, causal, slopes)

    return make_implementation("own_alibi", module, backend="torch", dtypes=("float32", "float64"), kind="module",
                               causal=True, mask=True, layers=("mha",), positional_bias=("alibi",))


def _geometric(heads: int) -> torch.Tensor:
    return torch.tensor([2.0 ** (-8.0 * i / heads) for i in range(1, heads + 1)])


def _interleave_swapped(heads: int) -> torch.Tensor:
    """The extra heads' slopes placed first (a wrong interleave): right only for powers of two."""
    slopes = alibi_slopes(heads)
    closest = 1 << (heads.bit_length() - 1)
    return torch.cat([slopes[closest:], slopes[:closest]])


def test_a_module_computing_its_own_alibi_is_asked_by_name_and_given_no_tensor() -> None:
    seen: list[dict] = []
    impl = _own_alibi(alibi_slopes, seen)
    assert impl.not_supported_reasons(BIAS_HEADS) == []  # bias=True is not needed: it takes no tensor
    assert statuses(check_module_case(impl, BIAS_HEADS)) == {"output": "pass", "property:mask": "pass"}
    assert seen and all(call == {"positional_bias": "alibi"} for call in seen)


def test_a_module_neither_taking_a_bias_nor_computing_one_skips_alibi_cases() -> None:
    impl = make_implementation("no_bias", lambda x, *, heads, weights, mask=None, causal=False: x, backend="torch",
                               kind="module", causal=True, mask=True, dtypes=("float64",))
    assert any("additive bias not supported" in r for r in impl.not_supported_reasons(BIAS_HEADS))


def test_the_declaration_is_checked() -> None:
    with pytest.raises(PluginError) as info:
        register_module("bad_alibi", backend="torch", positional_bias=("sinusoidal",))(
            lambda x, *, heads, weights, mask=None, causal=False, positional_bias=None: x)
    assert "positional_bias=('sinusoidal',) has unknown values ['sinusoidal']; choose from ('alibi',)" in str(info.value)


def test_a_declared_positional_bias_needs_the_parameter() -> None:
    with pytest.raises(PluginError) as info:
        register_module("no_param", backend="torch", positional_bias=("alibi",))(
            lambda x, *, heads, weights, mask=None, causal=False: x)
    assert "`positional_bias` (positional_bias= is declared)" in str(info.value)


def statuses(results: list) -> dict[str, str]:
    return {r["check"]: r["status"] for r in results}


@pytest.mark.parametrize("slopes_of, heads, wrong", [
    (_geometric, 6, [0, 1, 2, 3, 4, 5]),
    (_geometric, 12, list(range(12))),
    (_interleave_swapped, 6, [0, 1, 2, 3, 4, 5]),
    (lambda h: torch.cat([alibi_slopes(h)[:-1], alibi_slopes(h)[-1:] * 2]), 20, [19]),
])
def test_wrong_slopes_fail_naming_the_positional_bias_and_the_heads(slopes_of, heads, wrong) -> None:
    case = BIAS_HEADS.with_(heads=heads, d_model=4 * heads, causal=heads != 12, mask="key_padding" if heads == 12 else "none")
    [output] = check_module_case(_own_alibi(slopes_of), case)
    assert output["status"] == "fail"
    reason = output["reason"]
    assert "the positional bias (ALiBi, computed by the layer itself) is wrong" in reason, reason
    assert "the same case without it passes" in reason
    expected = "every head fails" if len(wrong) == heads else f"{len(wrong)} of {heads} heads fail"
    assert expected in reason, reason
    slope = alibi_slopes(heads)[wrong[0]].item()
    assert f"{wrong[0]} (slope 2^-{-math.log2(slope):g})" in reason, reason


def test_right_slopes_for_powers_of_two_pass_whatever_the_formula() -> None:
    """2^(-8 i / H) is the standard for H a power of two: no alarm there."""
    for heads in (4, 8):
        case = BIAS_HEADS.with_(heads=heads, d_model=8 * heads)
        assert statuses(check_module_case(_own_alibi(_geometric), case))["output"] == "pass"


def test_a_module_handed_the_bias_that_drops_it_is_named_too() -> None:
    def ignores_bias(x, *, heads, weights, mask=None, causal=False, bias=None):
        return _attention(x, heads, weights, mask, causal, torch.zeros(heads))

    impl = make_implementation("ignores_bias", ignores_bias, backend="torch", dtypes=("float64",), kind="module",
                               causal=True, mask=True, bias=True)
    [output] = check_module_case(impl, BIAS_HEADS)
    assert "the positional bias (ALiBi, handed to the layer as bias=) is wrong" in output["reason"]


def test_the_reference_uses_the_standard_slopes() -> None:
    inputs = make_module_inputs(BIAS_HEADS, 0)
    assert inputs.bias64 is not None
    torch.testing.assert_close(inputs.bias64, alibi_bias(6, 40, 40), rtol=0, atol=0)
    assert float(inputs.bias64[0, 4, 3, 0]) == -0.5 * 3  # head 4 of 6: slope 2^-1


@pytest.mark.parametrize("suite", ["small", "quick", "full"])
def test_every_suite_has_alibi_for_head_counts_not_powers_of_two_in_float32(suite: str) -> None:
    impl = _own_alibi(alibi_slopes)
    heads = {c.heads for c in module_cases(impl, suite) if c.bias == "alibi" and c.dtype == "float32"}
    odd = {h for h in heads if h & (h - 1)}
    assert odd >= ({6} if suite == "small" else {6, 12, 20}), heads


def test_the_logit_term_counts_logits_where_the_softmax_spreads_its_weight() -> None:
    """A row's only key (weight 1) has no rounding error to bound; ALiBi's far keys (weight ~0) add nothing."""
    from harness.modules.reference import weighted_logit

    one_key = ModuleCase(batch=1, seq=1, d_model=16, heads=2, dtype="float16")
    assert weighted_logit(one_key, make_module_inputs(one_key, 0)) == 0.0
    steep = ModuleCase(batch=1, seq=100, d_model=96, heads=12, bias="alibi", dtype="float16")
    inputs = make_module_inputs(steep, 0)
    assert inputs.bias64 is not None and float(inputs.bias64.abs().max()) > 60  # 2^-0.5 x 99
    assert 0.0 < weighted_logit(steep, inputs) < 10.0


def test_a_float16_layer_rounding_steep_alibi_logits_passes() -> None:
    """Plain float16 arithmetic (scores + bias rounded to float16) for 12 heads, whose slope 2^-0.5 reaches -70."""
    def fp16_layer(x, *, heads, weights, mask=None, causal=False, positional_bias=None):
        b, t, d_model = x.shape
        q, k, v = torch.nn.functional.linear(x, weights.in_proj_weight, weights.in_proj_bias).chunk(3, dim=-1)
        q, k, v = (y.reshape(b, t, heads, -1).transpose(1, 2) for y in (q, k, v))
        distance = (torch.arange(t)[:, None] - torch.arange(t)[None, :]).abs().double()
        bias = (-alibi_slopes(heads)[:, None, None] * distance).to(x.dtype)
        scores = q @ k.transpose(-1, -2) * (1.0 / math.sqrt(q.shape[-1])) + bias
        if mask is not None:
            scores = scores.masked_fill(~mask[:, None, None, :], float("-inf"))
        out = (torch.softmax(scores, -1) @ v).transpose(1, 2).reshape(b, t, d_model)
        return torch.nn.functional.linear(out, weights.out_proj_weight, weights.out_proj_bias)

    impl = make_implementation("fp16_layer", fp16_layer, backend="torch", dtypes=("float16",), kind="module",
                               mask=True, layers=("mha",), positional_bias=("alibi",))
    case = ModuleCase(batch=2, seq=100, d_model=96, heads=12, bias="alibi", mask="key_padding", dtype="float16")
    assert statuses(check_module_case(impl, case, 3)) == {"output": "pass", "property:mask": "pass"}


def test_a_failure_elsewhere_is_not_blamed_on_the_positional_bias() -> None:
    """Q and K swapped in the packed weight fails with or without ALiBi: the reason names no positional variant."""
    def swapped(x, *, heads, weights, mask=None, causal=False, positional_bias=None):
        d = x.shape[-1]
        w = weights.in_proj_weight
        packed = torch.cat([w[d:2 * d], w[:d], w[2 * d:]])
        b = weights.in_proj_bias
        bias = None if b is None else torch.cat([b[d:2 * d], b[:d], b[2 * d:]])
        moved = dataclasses.replace(weights, in_proj_weight=packed, in_proj_bias=bias)
        slopes = alibi_slopes(heads) if positional_bias == "alibi" else torch.zeros(heads)
        return _attention(x, heads, moved, mask, causal, slopes)

    impl = make_implementation("swapped", swapped, backend="torch", dtypes=("float64",), kind="module", causal=True,
                               mask=True, layers=("mha",), positional_bias=("alibi",))
    [output] = check_module_case(impl, BIAS_HEADS)
    assert output["status"] == "fail" and "positional" not in output["reason"], output["reason"]
