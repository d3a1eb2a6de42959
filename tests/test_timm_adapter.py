"""timm's attention layers (examples/real/timm_attention.py) and the module conventions they declare.

A module that takes a 4-D attention mask and no ``causal`` (timm's ``Attention``, SDPA's ``attn_mask``) declares
``Conventions(mask_kind=..., takes_causal=False)`` and attnbench hands it key padding and causal masking as one
mask. The first tests run a layer written the way timm's is, so they run without timm; the last ones run timm
itself and are skipped with the reason when it does not import (timm imports torchvision, which must be the build
made for this torch: ``pip install 'attnbench[timm]'``).
"""

from __future__ import annotations

import importlib.util
import types
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from harness import Conventions, register_module
from harness.contract.adaptation import module_mask
from harness.errors import PluginError
from harness.modules.cases import ModuleCase
from harness.verify.modules import check_module_case

ROOT = Path(__file__).resolve().parent.parent
CASES = [ModuleCase(causal=True), ModuleCase(mask="key_padding"), ModuleCase(causal=True, mask="key_padding", seq=13),
         ModuleCase(proj_bias=False, heads=2, seq=9, mask="key_padding")]


def timm_style(x, *, heads, weights, mask=None):
    """timm's ``Attention.forward`` with ``fused_attn=False``, written out: the mask is added to the scores."""
    b, t, dm = x.shape
    qkv = F.linear(x, weights.in_proj_weight, weights.in_proj_bias).reshape(b, t, 3, heads, dm // heads)
    q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
    scores = (q * (dm // heads) ** -0.5) @ k.transpose(-2, -1)
    if mask is not None:
        scores = scores + mask
    out = (scores.softmax(dim=-1) @ v).transpose(1, 2).reshape(b, t, dm)
    return F.linear(out, weights.out_proj_weight, weights.out_proj_bias)


MODULE = dict(backend="torch", dtypes=("float32", "float64"), causal=True, mask=True)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_a_module_taking_an_additive_4d_mask_passes_once_declared(case: ModuleCase) -> None:
    impl = register_module("timm_style", **MODULE, conventions=Conventions(mask_kind="additive", takes_causal=False))(
        timm_style).__attnbench__
    results = check_module_case(impl, case)
    assert [r.status for r in results] == ["pass"] * len(results), [r.reason for r in results]
    assert results[0].metrics["conventions"]["mask_kind"] == "additive"


def test_the_same_module_declared_with_a_boolean_mask_fails() -> None:
    """A boolean mask added to the scores adds 1 where a key may be attended: the declaration is what passes."""
    impl = register_module("timm_style_bool", **MODULE, conventions=Conventions(takes_causal=False))(timm_style).__attnbench__
    assert check_module_case(impl, ModuleCase(causal=True, mask="key_padding"))[0].status == "fail"


def test_the_module_mask_folds_causal_bottom_right_over_a_cache() -> None:
    x = torch.zeros(2, 3, 8, dtype=torch.float32)
    keys = torch.tensor([[True] * 5, [False] + [True] * 4])
    mask = module_mask(Conventions(mask_kind="additive", takes_causal=False), x, keys, causal=True, past=2)
    assert mask is not None and mask.shape == (2, 1, 3, 5) and mask.dtype == torch.float32
    allowed = mask == 0
    assert allowed[0, 0].tolist() == [[True, True, True, False, False], [True, True, True, True, False], [True] * 5]
    assert not allowed[1, 0, :, 0].any()
    only_keys = module_mask(Conventions(mask_kind="additive"), x, keys, causal=True, past=2)
    assert only_keys is not None and only_keys.shape == (2, 1, 1, 5)  # causal passed as causal=


@pytest.mark.parametrize(("conventions", "named"), [(Conventions(layout="BTHD"), "layout"),
                                                     (Conventions(returns="out_lse"), "returns"),
                                                     (Conventions(mask_kind="key_padding"), "key padding already")])
def test_a_module_declares_only_its_mask(conventions: Conventions, named: str) -> None:
    with pytest.raises(PluginError, match=named):
        register_module("bad_module", **MODULE, conventions=conventions)(timm_style)


def test_a_module_without_causal_must_declare_it() -> None:
    with pytest.raises(PluginError, match="causal"):
        register_module("no_causal", **MODULE)(timm_style)


def _timm() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location("real_timm_attention", ROOT / "examples" / "real" / "timm_attention.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if module.MISSING:
        pytest.skip(module.MISSING)
    return module


ROPE_CASES = [ModuleCase(rope="rotate_half", causal=True), ModuleCase(rope="interleaved", mask="key_padding", seq=11)]


@pytest.mark.parametrize("name", ["timm_attention", "timm_attention_unfused", "timm_attention_rope"])
def test_timm_layers_pass_with_declarations_only(name: str) -> None:
    impl = getattr(_timm(), name).__attnbench__
    cases = CASES + [c.with_(dtype="float64") for c in CASES[:2]] + (
        ROPE_CASES if name.endswith("rope") else [CASES[2].with_(dtype="bfloat16")])
    for case in cases:
        results = check_module_case(impl, case)
        assert [r.status for r in results] == ["pass"] * len(results), f"{case.id}: {[r.reason for r in results]}"


def test_timm_unfused_with_a_boolean_mask_fails() -> None:
    """timm adds ``attn_mask`` to the scores: handed a boolean mask, as SDPA takes it, the unfused path is wrong."""
    unfused = _timm().timm_attention_unfused  # a fresh copy of the plugin: registering it again changes only this one
    impl = register_module("timm_bool", **MODULE, prepare=True, conventions=Conventions(takes_causal=False))(
        unfused).__attnbench__
    assert check_module_case(impl, ModuleCase(mask="key_padding"))[0].status == "fail"
