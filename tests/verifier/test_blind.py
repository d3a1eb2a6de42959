"""How well `verify --suite quick` generalises: kernels broken in ways no other verifier test names.

The plugins in ``tests/verifier/blind/`` were written without reading the verifier's other broken
plugins or its tests (``blind/README.md`` has the table of what quick and full catch). Each broken
one is right on most inputs and wrong under one trigger, stated here as a predicate on the case: quick
must flag it (a ``fail`` or ``error``) on a case that has the trigger. The ones quick does not catch
yet are strict xfails that say why; when the verifier learns to catch one, its xfail turns into an
XPASS failure and the mark is removed. Each correct but unusual one must pass every quick case.

The checks run in this process, exactly as a verify worker runs them (``blind_sets.py``: quick's
cases and checks, two trials, one torch thread), so no worker start-up is paid.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from blind_sets import BlindSet, Trigger, assert_accepted, assert_flagged_on_its_trigger

from harness.case.attention import AttentionCase

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_thread")]

BLIND = BlindSet(Path(__file__).resolve().parent / "blind")


def _max_klen(case: AttentionCase) -> int:
    return max((k for _, k in case.varlen), default=0) if case.varlen else case.tk


TRIGGERS: dict[str, Trigger] = {
    "broken_advances_cache_seqlens": lambda c: c.cache_seqlens is not None or c.page_size is not None,
    "broken_bf16_long_running_sum": lambda c: c.dtype == "bfloat16" and c.tk > 2048,
    "broken_bias_dropped_with_mask": lambda c: c.bias != "none" and (c.mask != "none" or bool(c.structures)),
    "broken_bias_first_batch": lambda c: c.bias != "none" and c.batch > 1,
    "broken_cache_window_capacity": lambda c: c.window is not None and c.cache_seqlens is not None,
    "broken_causal_query_chunks": lambda c: c.tq > 2048 and (c.causal or bool(c.structures)),
    "broken_gqa_wide_groups_modulo": lambda c: c.heads // c.kv_heads > 4 and c.kv_heads > 1,
    "broken_grad_noncontiguous_upstream": lambda c: c.grad,
    "broken_headdim_chunks_floor": lambda c: c.d > 128 and c.d % 128 != 0,
    "broken_kv_layout_from_q": lambda c: c.layout != "contiguous" or any(n in ("q", "k", "v") for n, _ in c.layouts),
    "broken_long_keys_tail_block": lambda c: c.tk > 4096 and c.tk % 512 != 0,
    "broken_paged_default_scale": lambda c: c.page_size is not None and c.scale is not None,
    "broken_returns_input_view": lambda c: c.tk == 1,
    "broken_reused_output_buffer": lambda c: True,
    "broken_scale_zero_falsy": lambda c: c.scale == 0,
    "broken_splitkv_boundary_overlap": lambda c: c.tk > 2048,
    "broken_stale_rows_workspace": lambda c: c.mask != "none" or bool(c.structures),
    "broken_varlen_long_sequence_blocks": lambda c: c.varlen is not None and c.causal and _max_klen(c) > 256,
    "broken_window_bottom_right_shift": lambda c: c.window is not None and c.causal_align == "bottom_right" and c.tq != c.tk,
    "broken_work_items_tail": lambda c: c.batch * c.heads > 64,
}
"""What each broken plugin needs in a case to be wrong (its docstring says why)."""

NOT_CAUGHT_BY_QUICK: dict[str, str] = {
    "broken_bias_first_batch": "the only bias is ALiBi, the same for every batch element",
}
"""Broken plugins quick misses today, and why (measured; see blind/README.md)."""


def _broken_params() -> list[Any]:
    params = []
    for name in BLIND.names("broken"):
        why = NOT_CAUGHT_BY_QUICK.get(name)
        marks = [pytest.mark.xfail(strict=True, reason=f"not caught yet by quick: {why}")] if why else []
        params.append(pytest.param(name, marks=marks, id=name))
    return params


def test_every_broken_plugin_states_its_trigger() -> None:
    assert sorted(TRIGGERS) == BLIND.names("broken")
    assert set(NOT_CAUGHT_BY_QUICK) <= set(TRIGGERS)
    assert len(BLIND.names("broken")) >= 12 and len(BLIND.names("correct")) >= 3


@pytest.mark.parametrize("name", _broken_params())
def test_quick_flags_the_broken_plugin_on_its_trigger(name: str) -> None:
    assert_flagged_on_its_trigger(BLIND, name, TRIGGERS[name])


@pytest.mark.parametrize("name", BLIND.names("correct"))
def test_quick_accepts_the_correct_plugin(name: str) -> None:
    assert_accepted(BLIND, name)
