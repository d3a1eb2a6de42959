"""transformers' attention under the plugin contract: interface functions as kernels, a Llama layer as a module.

Skipped, with the reason, where transformers is not installed (``pip install 'attnbench[transformers]'``).
"""

from __future__ import annotations

import pytest
import torch

from harness.adapters.transformers_attention import attention_function, four_d, transformers_missing
from harness.case.attention import AttentionCase
from harness.contract.discovery import load_registry
from harness.modules.cases import ModuleCase
from harness.verify.case_checks import check_kernel_case
from harness.verify.modules import check_module_case

pytestmark = pytest.mark.skipif(transformers_missing() is not None, reason=transformers_missing() or "")

KERNEL_CASES = [
    AttentionCase(batch=2, heads=8, kv_heads=2, tq=37, d=32, causal=True),
    AttentionCase(batch=3, heads=4, tq=13, tk=61, d=16, mask="key_padding"),
    AttentionCase(batch=2, heads=4, kv_heads=1, tq=1, tk=61, d=64, cache_seqlens=(61, 9)),
    AttentionCase(heads=2, tq=33, d=32, causal=True, window=(7, 0), grad=True),
    AttentionCase(heads=2, tq=17, d=32, scale=0.3),
]


def statuses(results: list) -> set[str]:  # type: ignore[type-arg]
    return {r.status for r in results}


@pytest.mark.parametrize("name", ["hf_sdpa", "hf_eager"])
@pytest.mark.parametrize("case", KERNEL_CASES, ids=lambda c: c.id)
def test_interface_functions_pass_as_kernels(name: str, case: AttentionCase) -> None:
    impl = load_registry([]).get(name)
    assert impl.declared.on_request and not impl.not_supported_reasons(case)
    assert statuses(check_kernel_case(impl, case, trials=1)) == {"pass"}


def test_eager_gives_a_row_with_no_key_the_mean_of_v() -> None:
    """transformers' eager path adds the dtype's lowest value, never -inf: a row with no allowed key averages V
    (a convention, not zeros); its SDPA path does not. The verifier keeps finding it."""
    case = AttentionCase(batch=2, heads=2, tq=24, tk=40, d=16, mask="empty_rows")
    registry = load_registry([])
    eager = check_kernel_case(registry.get("hf_eager"), case, trials=1)[0]
    assert eager.status == "fail" and "oracle 0" in (eager.reason or "")
    assert statuses(check_kernel_case(registry.get("hf_sdpa"), case, trials=1)) == {"pass"}


def test_a_function_registered_in_the_attention_interface() -> None:
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    def unscaled(module, query, key, value, attention_mask, scaling=None, **kwargs):  # type: ignore[no-untyped-def]
        return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=1.0, **kwargs)

    AttentionInterface.register("attnbench_unscaled", unscaled)
    impl = attention_function("attnbench_unscaled", name="unscaled", grad=False)
    assert impl.not_supported_reasons(KERNEL_CASES[0]) == []
    output = check_kernel_case(impl, KERNEL_CASES[0], trials=1)[0]
    assert (output.check, output.status) == ("output", "fail")  # it ignores the scale
    [missing] = attention_function("no_such_function", name="nothing").not_supported_reasons(KERNEL_CASES[0])
    assert "no attention function 'no_such_function'" in missing and "sdpa" in missing


def test_masks_in_transformers_forms() -> None:
    allowed = torch.tensor([[True, False], [True, True]])
    assert four_d(allowed, "bool", torch.float32).shape == (1, 1, 2, 2)
    additive = four_d(allowed, "additive", torch.float32)
    assert additive is not None and additive[0, 0, 0, 1] == torch.finfo(torch.float32).min and additive[0, 0, 1].eq(0).all()


@pytest.mark.parametrize("case", [
    ModuleCase(batch=2, seq=12, d_model=64, heads=8, kv_heads=2, causal=True, rope="rotate_half", proj_bias=False),
    ModuleCase(batch=2, seq=3, d_model=64, heads=8, kv_heads=2, causal=True, rope="rotate_half", proj_bias=False,
               past=21, mask="key_padding"),
    ModuleCase(batch=2, seq=1, d_model=64, heads=8, kv_heads=1, causal=True, rope="rotate_half", past=30),
    ModuleCase(batch=2, seq=20, d_model=32, heads=4, mask="key_padding"),
], ids=lambda c: c.id)
def test_a_llama_attention_layer_built_from_its_config(case: ModuleCase) -> None:
    impl = load_registry([]).get("hf_llama_attention")
    assert not impl.not_supported_reasons(case)
    assert statuses(check_module_case(impl, case, trials=2)) == {"pass"}


@pytest.mark.parametrize(("family", "implementation"), [("qwen2", "eager"), ("mistral", "sdpa")])
def test_other_families_layers(family: str, implementation: str) -> None:
    from harness.adapters.transformers_attention import attention_layer

    layer = attention_layer(name=f"{family}_layer", model_type=family, attn_implementation=implementation,
                            dtypes=("float32",))
    case = ModuleCase(batch=2, seq=3, d_model=64, heads=8, kv_heads=2, causal=True, rope="rotate_half",
                      proj_bias=False, past=9)
    assert statuses(check_module_case(layer, case, trials=1)) == {"pass"}
    reasons = layer.not_supported_reasons(case.with_(proj_bias=True))
    assert reasons and "projection biases" in reasons[0]
