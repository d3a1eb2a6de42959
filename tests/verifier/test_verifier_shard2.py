"""The other half of ``test_verifier.py``'s plugins, in a verify run of its own (a second test worker)."""

from __future__ import annotations

from typing import Any

import pytest
from verifier_expectations import BROKEN, UNUSUAL, assert_accepted, assert_complete, assert_rejected, cells_of, shard, verify

pytestmark = pytest.mark.slow  # whole verify runs: not in the inner loop

NAMES = shard(1)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, dict[str, Any]]:
    return verify(tmp_path_factory.mktemp("verify"), NAMES)


@pytest.mark.parametrize("name", [n for n in NAMES if n in BROKEN])
def test_broken_implementation_is_rejected(run: tuple[int, dict[str, Any]], name: str) -> None:
    assert_rejected(run, name)


@pytest.mark.parametrize("name", [n for n in NAMES if n in UNUSUAL])
def test_unusual_but_correct_implementation_is_accepted(run: tuple[int, dict[str, Any]], name: str) -> None:
    assert_accepted(run, name)


def test_failures_record_their_numbers(run: tuple[int, dict[str, Any]]) -> None:
    fail = next(c for c in cells_of(run, "broken_wrong_scale") if c["status"] == "fail")
    metrics = fail["metrics"]
    for key in ("max_abs_err", "rel_l2", "base_err", "ratio", "bound", "m", "floor", "worst_index", "trials"):
        assert key in metrics, key
    assert metrics["max_abs_err"] > metrics["bound"] and metrics["m"] == 2


def test_the_run_exits_1_and_its_result_file_is_complete(run: tuple[int, dict[str, Any]]) -> None:
    assert_complete(run)
