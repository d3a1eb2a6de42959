"""A second blind set (``tests/verifier/blind_models/``): kernels broken where real models' inputs go, and correct but
unusual ones that must keep passing at those inputs.

Each broken plugin reproduces one reported class of attention bug (its docstring says which) and is right on
most inputs; the trigger below is the predicate a case must satisfy for it to be wrong. ``verify --suite quick``
must flag every one (a ``fail`` or ``error``) on a case with its trigger; every correct one must pass every quick
case. ``blind_models/README.md`` has the before/after counts (``blind_models/measure.py`` prints them).

The checks run in this process as a verify worker runs them (``blind_sets.py``: quick's cases and checks, two
trials, one torch thread).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from blind_sets import BlindSet, Trigger, assert_accepted, assert_flagged_on_its_trigger

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_thread")]

BLIND = BlindSet(Path(__file__).resolve().parent / "blind_models", tag="_model")


def _masked(c: Any) -> bool:
    return c.mask != "none" or bool(c.structures) or c.causal


TRIGGERS: dict[str, Trigger] = {
    "broken_model_bf16_denominator": lambda c: c.dtype == "bfloat16" and c.tk > 1000,
    "broken_model_cache_topleft": lambda c: c.cache_seqlens is not None and c.causal and c.causal_align == "top_left",
    "broken_model_finite_sentinel_max": lambda c: c.inputs == "huge",
    "broken_model_fp16_qk_before_scale": lambda c: c.dtype == "float16" and c.inputs == "huge",
    "broken_model_gqa_grad_first_head": lambda c: c.grad and c.heads != c.kv_heads,
    "broken_model_grad_wide_head_strided": lambda c: c.grad and c.d > 128 and (c.layout != "contiguous" or bool(c.layouts)),
    # a (B, 1, 1, Tk) mask: key padding, or a one-query cache step folded into one
    "broken_model_key_padding_batch0": lambda c: c.tk >= 512 and c.batch > 1 and (c.mask != "none" or c.cache_seqlens is not None),
    # a layer computing its own ALiBi slopes: wrong only for a head count that is not a power of two
    "broken_model_module_alibi_contiguous_extra": lambda c: c.bias == "alibi" and c.heads & (c.heads - 1) != 0,
    "broken_model_module_alibi_geometric_slopes": lambda c: c.bias == "alibi" and c.heads & (c.heads - 1) != 0,
    "broken_model_module_rope_half_table": lambda c: c.dtype in ("bfloat16", "float16") and c.rope != "none" and c.seq > 256,
    "broken_model_mask_first_tiles": lambda c: c.tk > 1024 and _masked(c),
    "broken_model_nan_first_block": lambda c: c.tk > 512 and _masked(c),
    "broken_model_packed_mask_cache": lambda c: c.varlen is not None,
    # K and V apart, or a property that passes K and V of its own beside a non-contiguous one
    "broken_model_v_with_k_strides": lambda c: c.layout_of("k") != c.layout_of("v") or c.layout != "contiguous",
}


def test_the_set_is_whole() -> None:
    assert sorted(TRIGGERS) == BLIND.names("broken")
    assert len(BLIND.names("broken")) >= 10 and len(BLIND.names("correct")) >= 4


@pytest.mark.parametrize("name", BLIND.names("broken"))
def test_quick_flags_the_broken_plugin_on_its_trigger(name: str) -> None:
    assert_flagged_on_its_trigger(BLIND, name, TRIGGERS[name])


@pytest.mark.parametrize("name", BLIND.names("correct"))
def test_quick_accepts_the_correct_plugin(name: str) -> None:
    assert_accepted(BLIND, name)


@pytest.mark.parametrize("name", [n for n in BLIND.names("broken") if "alibi" in n])
def test_a_layers_own_alibi_slopes_fail_naming_the_positional_bias(name: str) -> None:
    _, result = assert_flagged_on_its_trigger(BLIND, name, TRIGGERS[name])
    assert "the positional bias (ALiBi, computed by the layer itself) is wrong" in str(result["reason"]), result
