"""What crosses the boundary: every array in every layout, the memory a call may touch, results that stay
valid, and large cases checked exactly on sampled rows (direct checks, no worker processes)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from harness.case.attention import AttentionCase
from harness.contract.discovery import load_registry
from harness.reference.tensors import make_inputs
from harness.verify.boundary import Watch, shares_storage
from harness.verify.checks import SAMPLE_ABOVE_SCORES, check_grad, check_output, large_case

pytestmark = pytest.mark.usefixtures("one_thread")

PLUGINS = Path(__file__).parent / "plugins"


def _plugin(name: str):
    return load_registry((str(PLUGINS / f"{name}.py"),)).get(name)


def test_every_array_besides_q_k_v_arrives_in_the_aux_layout() -> None:
    for backend in ("torch", "numpy"):
        case = AttentionCase(batch=2, heads=4, kv_heads=2, tq=3, tk=13, d=8, mask="random", causal=True,
                             cache_seqlens=(13, 4), page_size=5, causal_align="bottom_right", aux_layout="strided")
        inputs = make_inputs(case, 1, backend)
        kwargs = inputs.kwargs(case, ("cache_seqlens", "paged", "bottom_right"))
        for name in ("mask", "cache_seqlens", "block_table"):
            x = kwargs[name]
            step = x.stride(-1) if isinstance(x, torch.Tensor) else x.strides[-1] // x.itemsize
            assert step == 2, (backend, name)
        assert case.id.endswith("aux=strided")
    offset = AttentionCase(heads=4, tq=5, d=8, bias="alibi", aux_layout="offset")
    bias = make_inputs(offset, 1, "torch").bias
    assert bias.storage_offset() > 0 and bias.is_contiguous()
    transposed = AttentionCase(tq=5, tk=7, d=8, mask="random", mask_rank="2d", aux_layout="transposed")
    mask = make_inputs(transposed, 1, "torch").mask
    assert mask.stride() == (1, 5)
    assert AttentionCase(tq=5, d=8).id == "B1-H1-T5-d8-float32"  # ids of existing cases unchanged


def test_a_write_around_a_view_or_into_a_passed_array_is_named() -> None:
    buffer = torch.zeros(20)
    view = buffer[3:11]
    lengths = torch.tensor([3, 4], dtype=torch.int32)
    watch = Watch({"q": view, "cache_seqlens": lengths})
    buffer[0] = 1.0  # before the view: not its elements, but the caller's memory
    assert "buffer behind input(s) q" in (watch.problem() or "")
    watch = Watch({"q": view, "cache_seqlens": lengths})
    lengths[1] = 5
    assert "modified its input(s) cache_seqlens" in (watch.problem() or "")
    array = np.zeros(12)[::2]
    watch = Watch({"mask": array})
    array.base[1] = 7.0
    assert "buffer behind input(s) mask" in (watch.problem() or "")
    assert Watch({"q": torch.ones(3), "none": None}).problem() is None


def test_results_sharing_storage_are_told_apart_from_separate_ones() -> None:
    buffer = torch.zeros(2, 8)
    assert shares_storage(buffer, buffer[1])
    assert not shares_storage(buffer[0], buffer[1])  # one buffer, disjoint halves
    assert not shares_storage(torch.zeros(3), torch.zeros(3))
    array = np.zeros((2, 8))
    assert shares_storage(array, array[:, 1]) and not shares_storage(array[0], array[1])


def test_large_cases_are_checked_exactly_on_sampled_rows_output_and_gradients() -> None:
    case = AttentionCase(heads=2, tq=1030, tk=2060, d=160, causal=True)
    assert case.batch * case.heads * case.tq * case.tk > SAMPLE_ABOVE_SCORES and large_case(case)
    good = check_output(load_registry().get("torch_eager"), case, 1)
    assert good["status"] == "pass" and good["metrics"]["sampled_rows"] == 48
    bad = check_output(_plugin("broken_head_dim_over_128"), case, 1)
    assert bad["status"] == "fail" and "max|err|" in bad["reason"]
    grad_case = AttentionCase(heads=2, tq=1030, tk=2060, d=32, grad=True)
    assert check_grad(load_registry().get("torch_eager"), grad_case, 1)["status"] == "pass"
    wrong = check_grad(_plugin("broken_wrong_grad"), grad_case, 1)
    assert wrong["status"] == "fail" and "max|err|" in wrong["reason"]


def test_an_output_buffer_reused_across_calls_fails_and_a_fresh_one_passes() -> None:
    from harness.verify.stateful import stateful

    case = AttentionCase(batch=2, heads=2, tq=5, tk=7, d=8)
    reused = stateful(_plugin("broken_reused_output_buffer"), case)
    assert reused["status"] == "fail" and "reuses an output buffer" in reused["reason"]
    assert stateful(load_registry().get("torch_eager"), case)["status"] == "pass"
