"""FP8 KV caches: verify catches kernels that read the scales wrongly and accepts every correct reading.

The plugins in ``fp8/`` each read an FP8 cache (``stored * scale``) with one mistake a real kernel makes (a scale
taken from the wrong axis, K's scale applied after the softmax, K's scale never read), plus one correct kernel that
folds the scales into its arithmetic without ever dequantizing. Each runs on the small suite's FP8 cases only
(the cases its declaration admits: a few, so the set runs in seconds), with the checks a verify worker runs, two
trials: a broken one must fail the output check on a case with its trigger, a correct one (and each built-in
that reads FP8 caches) must pass every check. The quantisation's own error is measured on every case and never
fails, however wrong the kernel.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from blind_sets import TRIALS, BlindSet

from harness.case.attention import AttentionCase
from harness.case.quantized import is_fp8
from harness.contract.discovery import load_registry
from harness.contract.registry import Implementation
from harness.verify.case_checks import check_kernel_case
from harness.verify.quantisation import CHECK as QUANTISATION
from harness.verify.suites import kernel_cases

pytestmark = pytest.mark.usefixtures("one_thread")

FP8 = BlindSet(Path(__file__).resolve().parent / "fp8")

TRIGGERS: dict[str, Callable[[AttentionCase], bool]] = {
    "broken_fp8_head_scale_by_token": lambda c: c.kv_scales == "head" and c.kv_heads > 1,
    "broken_fp8_token_scale_token_major": lambda c: c.kv_scales == "token" and c.kv_heads > 1,
    "broken_fp8_scales_after_softmax": lambda c: True,
    "broken_fp8_k_scale_ignored": lambda c: True,
}
"""What each broken plugin needs in an FP8 case to be wrong (its docstring says why)."""


def _results(impl: Implementation) -> list[tuple[AttentionCase, Any]]:
    """(case, check result) of every check of the small suite's FP8 cases ``impl`` runs."""
    cases = [c for c in kernel_cases(impl, "small") if is_fp8(c) and not impl.not_supported_reasons(c)]
    assert cases, f"{impl.name} runs no FP8 case of the small suite"
    return [(case, result) for case in cases for result in check_kernel_case(impl, case, TRIALS)]


def test_every_broken_plugin_states_its_trigger() -> None:
    assert sorted(TRIGGERS) == FP8.names("broken") and FP8.names("correct")


@pytest.mark.parametrize("name", sorted(TRIGGERS))
def test_a_wrong_reading_of_the_scales_fails_the_output_check_on_its_trigger(name: str) -> None:
    results = _results(FP8.implementation(name))
    failed = [(case, r) for case, r in results if r.status != "pass"]
    assert failed, f"the small suite's FP8 cases passed {name}"
    assert all(TRIGGERS[name](case) for case, _ in failed), [(c.id, r.check, r.reason) for c, r in failed]
    assert any(r.check == "output" and r.status == "fail" for _, r in failed)
    quantisation = [r for _, r in results if r.check == QUANTISATION]
    assert quantisation and all(r.status == "pass" and r.metrics["reported_only"] for r in quantisation)


@pytest.mark.parametrize("name", [*FP8.names("correct"), "torch_sdpa", "torch_eager", "tiled_decode"])
def test_a_correct_reading_passes_every_check(name: str) -> None:
    impl = FP8.implementation(name) if name.startswith("correct") else load_registry(entry_points=False).get(name)
    if name == "tiled_decode":
        from implementations.tiled_decode import available

        if available() is not None:
            pytest.skip(f"tiled_decode is not built here: {available()}")
    results = _results(impl)
    bad = [f"{case.id} {r.check}: {r.status}: {r.reason}" for case, r in results if r.status != "pass"]
    assert not bad, "\n".join(bad)
    checks = {r.check for _, r in results}
    assert {"output", QUANTISATION, "property:stateful", "property:permutation", "property:slices"} <= checks
