"""`attnbench verify` rejects every deliberately broken implementation and accepts the unusual correct ones.

The plugins in ``plugins/`` are verified in :data:`~verifier_expectations.SHARDS` shards, one verify run each
(the quick suite, as users run it, with a short timeout, stopping a plugin after a few failing cases). The tests
are parametrised by shard (ids ``shardN-...``), each shard is a work unit of its own for the test processes
(tests/conftest.py), and the ``runs`` fixture makes a shard's run on first use, so the processes share the runs.
Each broken plugin must have at least one problem cell of the expected kind, each ``unusual_*`` plugin none.
The crash and hang plugins break on one shape only, so a run also shows that the cases after a crash or a
timeout still run.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from verifier_expectations import (
    BROKEN,
    EXPECTED,
    MAXFAIL,
    SHARDS,
    UNUSUAL,
    assert_accepted,
    assert_complete,
    assert_rejected,
    cells_of,
    shard,
    shard_flags,
    shard_of,
    verify,
)

pytestmark = pytest.mark.slow  # whole verify runs: not in the inner loop

Run = tuple[int, dict[str, Any]]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Callable[[int], Run]:
    """A shard's verify run by its index, made on first use and kept: a test process runs only the shards
    whose tests it was given."""
    @functools.cache
    def run(index: int) -> Run:
        return verify(tmp_path_factory.mktemp(f"verify{index}"), shard(index), *shard_flags(index))

    return run


def in_shard(*names: str) -> list[Any]:
    """``(index, name)`` parameters: each plugin's name with its shard's index, id ``shardN-name``."""
    return [pytest.param(shard_of(n), n, id=f"shard{shard_of(n)}-{n}") for n in names]


def test_at_least_38_bug_classes_and_every_one_has_an_expectation() -> None:
    assert len(BROKEN) >= 38
    assert sorted(EXPECTED) == sorted(BROKEN)
    assert len(UNUSUAL) >= 5
    assert sorted(n for i in range(SHARDS) for n in shard(i)) == sorted(BROKEN + UNUSUAL)  # each in one shard
    assert shard_of("broken_crash") == shard_of("broken_hang")  # one run shows a run going on after both


@pytest.mark.parametrize(("index", "name"), in_shard(*BROKEN))
def test_broken_implementation_is_rejected(runs: Callable[[int], Run], index: int, name: str) -> None:
    assert_rejected(runs(index), name)


@pytest.mark.parametrize(("index", "name"), in_shard(*UNUSUAL))
def test_unusual_but_correct_implementation_is_accepted(runs: Callable[[int], Run], index: int, name: str) -> None:
    assert_accepted(runs(index), name)


@pytest.mark.parametrize(("index", "name"), in_shard("broken_wrong_scale"))
def test_failures_record_their_numbers(runs: Callable[[int], Run], index: int, name: str) -> None:
    fail = next(c for c in cells_of(runs(index), name) if c["status"] == "fail")
    metrics = fail["metrics"]
    for key in ("max_abs_err", "rel_l2", "base_err", "ratio", "bound", "m", "floor", "worst_index", "trials"):
        assert key in metrics, key
    assert metrics["max_abs_err"] > metrics["bound"] and metrics["m"] == 2


@pytest.mark.parametrize(("index", "name"), in_shard("broken_wrong_layout"))
def test_maxfail_stops_a_plugin_and_records_the_cases_it_did_not_run(runs: Callable[[int], Run], index: int,
                                                                     name: str) -> None:
    """broken_wrong_layout fails every case: --maxfail runs exactly that many, and records each case left as skipped,
    saying why, so the file still lists the whole plan."""
    cells = cells_of(runs(index), name)
    failing = {c["case_id"] for c in cells if c["status"] == "fail"}
    stopped = [c for c in cells if c["reason"] and c["reason"].startswith("not run:")]
    assert len(failing) == MAXFAIL and stopped, [(c["case_id"], c["status"]) for c in cells[:10]]
    assert all(c["status"] == "skipped" and f"had {MAXFAIL} failing cases (--maxfail {MAXFAIL})" in c["reason"]
               for c in stopped)
    last_failing = max(i for i, c in enumerate(cells) if c["status"] == "fail")
    assert all(cells.index(c) > last_failing for c in stopped)  # the stop is in plan order: nothing run after it


@pytest.mark.parametrize("index", [pytest.param(i, id=f"shard{i}") for i in range(SHARDS)])
def test_the_run_exits_1_and_its_result_file_is_complete(runs: Callable[[int], Run], index: int) -> None:
    assert_complete(runs(index))


def test_a_correct_plugin_exits_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The exit status and the summary of a run with nothing to find (small: quick's verdict on the plugin is the
    shard's test above)."""
    code, data = verify(tmp_path, ["unusual_strided_output"], "--jobs", "1", suite="small")
    out = capsys.readouterr().out
    assert code == 0, out
    assert "unusual_strided_output" in out and "m = 2" in out and "all passed" in out
    assert {c["status"] for c in data["cells"]} == {"pass"}
