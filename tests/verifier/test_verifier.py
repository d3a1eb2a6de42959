"""`attnbench verify` rejects every deliberately broken implementation and accepts the unusual correct ones.

One verify run over half the plugins in ``plugins/`` (the quick suite, as users run it, with a short
timeout) serves the tests here; ``test_verifier_shard2.py`` runs the other half. Each broken plugin
must have at least one problem cell of the expected kind, each ``unusual_*`` plugin none. The crash
and hang plugins break on one shape only, so the run also shows that the cases after a crash or a
timeout still run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from verifier_expectations import (
    BROKEN,
    EXPECTED,
    UNUSUAL,
    assert_accepted,
    assert_complete,
    assert_rejected,
    shard,
    verify,
)

pytestmark = pytest.mark.slow  # whole verify runs: not in the inner loop

NAMES = shard(0)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, dict[str, Any]]:
    return verify(tmp_path_factory.mktemp("verify"), NAMES)


def test_at_least_38_bug_classes_and_every_one_has_an_expectation() -> None:
    assert len(BROKEN) >= 38
    assert sorted(EXPECTED) == sorted(BROKEN)
    assert len(UNUSUAL) >= 5
    assert {"broken_crash", "broken_hang"} <= set(NAMES)  # this shard shows a run going on after both


@pytest.mark.parametrize("name", [n for n in NAMES if n in BROKEN])
def test_broken_implementation_is_rejected(run: tuple[int, dict[str, Any]], name: str) -> None:
    assert_rejected(run, name)


@pytest.mark.parametrize("name", [n for n in NAMES if n in UNUSUAL])
def test_unusual_but_correct_implementation_is_accepted(run: tuple[int, dict[str, Any]], name: str) -> None:
    assert_accepted(run, name)


def test_the_run_exits_1_and_its_result_file_is_complete(run: tuple[int, dict[str, Any]]) -> None:
    assert_complete(run)


def test_a_correct_plugin_exits_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, data = verify(tmp_path, ["unusual_strided_output"], "--jobs", "1")
    out = capsys.readouterr().out
    assert code == 0, out
    assert "unusual_strided_output" in out and "m = 2" in out and "all passed" in out
    assert {c["status"] for c in data["cells"]} == {"pass"}
