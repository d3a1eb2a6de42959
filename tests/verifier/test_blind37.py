"""A second blind set (``tests/verifier/blind37/``): kernels broken where real models' inputs go, and correct but
unusual ones that must keep passing at those inputs.

Each broken plugin reproduces one reported class of attention bug (its docstring says which) and is right on
most inputs; the trigger below is the predicate a case must satisfy for it to be wrong. ``verify --suite quick``
must flag every one (a ``fail`` or ``error``) on a case with its trigger; every correct one must pass every quick
case. ``blind37/README.md`` has the before/after counts (``blind37/measure.py`` prints them).

The checks run in this process as a verify worker runs them (``kernel_cases``, ``check_kernel_case``, three
trials, one torch thread).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from harness.contract.discovery import load_registry
from harness.contract.registry import Implementation
from harness.verify.case_checks import check_kernel_case
from harness.verify.modules import check_module_case, module_cases
from harness.verify.suites import kernel_cases

pytestmark = pytest.mark.slow

BLIND = Path(__file__).resolve().parent / "blind37"
Trigger = Callable[[Any], bool]
"""A predicate on an AttentionCase (kernel plugins) or a ModuleCase (module plugins)."""


def _masked(c: Any) -> bool:
    return c.mask != "none" or bool(c.structures) or c.causal


TRIGGERS: dict[str, Trigger] = {
    "broken37_bf16_denominator": lambda c: c.dtype == "bfloat16" and c.tk > 1000,
    "broken37_cache_topleft": lambda c: c.cache_seqlens is not None and c.causal and c.causal_align == "top_left",
    "broken37_finite_sentinel_max": lambda c: c.inputs == "huge",
    "broken37_fp16_qk_before_scale": lambda c: c.dtype == "float16" and c.inputs == "huge",
    "broken37_gqa_grad_first_head": lambda c: c.grad and c.heads != c.kv_heads,
    "broken37_grad_wide_head_strided": lambda c: c.grad and c.d > 128 and (c.layout != "contiguous" or bool(c.layouts)),
    # a (B, 1, 1, Tk) mask: key padding, or a one-query cache step folded into one
    "broken37_key_padding_batch0": lambda c: c.tk >= 512 and c.batch > 1 and (c.mask != "none" or c.cache_seqlens is not None),
    # a layer computing its own ALiBi slopes: wrong only for a head count that is not a power of two
    "broken37_module_alibi_contiguous_extra": lambda c: c.bias == "alibi" and c.heads & (c.heads - 1) != 0,
    "broken37_module_alibi_geometric_slopes": lambda c: c.bias == "alibi" and c.heads & (c.heads - 1) != 0,
    "broken37_module_rope_half_table": lambda c: c.dtype in ("bfloat16", "float16") and c.rope != "none" and c.seq > 256,
    "broken37_mask_first_tiles": lambda c: c.tk > 1024 and _masked(c),
    "broken37_nan_first_block": lambda c: c.tk > 512 and _masked(c),
    "broken37_packed_mask_cache": lambda c: c.varlen is not None,
    # K and V apart, or a property that passes K and V of its own beside a non-contiguous one
    "broken37_v_with_k_strides": lambda c: c.layout_of("k") != c.layout_of("v") or c.layout != "contiguous",
}


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _names(prefix: str) -> list[str]:
    return sorted(p.stem for p in BLIND.glob(f"{prefix}37_*.py"))


def _impl(name: str) -> Implementation:
    registry = load_registry([str(BLIND / f"{name}.py")], builtins=False, entry_points=False)
    assert not registry.fatal_errors, registry.fatal_errors
    return registry.get(name)


def _problems(impl: Implementation) -> Iterator[tuple[Any, dict[str, Any]]]:
    """Every (case, result) of quick that is not a pass or a skip, in suite order, lazily (kernels and modules)."""
    module = impl.kind == "module"
    for case in module_cases(impl, "quick") if module else kernel_cases(impl, "quick"):
        if impl.not_supported_reasons(case) or (module and case.unsupported_by(impl)):
            continue
        for result in check_module_case(impl, case, 3) if module else check_kernel_case(impl, case, 3):
            if result["status"] not in ("pass", "skipped"):
                yield case, result


def test_the_set_is_whole() -> None:
    assert sorted(TRIGGERS) == _names("broken")
    assert len(_names("broken")) >= 10 and len(_names("correct")) >= 4


@pytest.mark.parametrize("name", _names("broken"))
def test_quick_flags_the_broken_plugin_on_its_trigger(name: str) -> None:
    first = next(_problems(_impl(name)), None)
    assert first is not None, f"verify --suite quick passed {name}"
    case, result = first
    assert TRIGGERS[name](case), (f"{name} was flagged on {case.id} ({result['check']}: {result['reason']}), a case "
                                  f"without its trigger: a false alarm, or the trigger is stated wrongly")


@pytest.mark.parametrize("name", _names("correct"))
def test_quick_accepts_the_correct_plugin(name: str) -> None:
    problems = [f"{case.id} {result['check']}: {result['status']}: {result['reason']}"
                for case, result in _problems(_impl(name))]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("name", [n for n in _names("broken") if "alibi" in n])
def test_a_layers_own_alibi_slopes_fail_naming_the_positional_bias(name: str) -> None:
    case, result = next(_problems(_impl(name)))
    assert "the positional bias (ALiBi, computed by the layer itself) is wrong" in str(result["reason"]), result
