"""`attnbench verify --fuzz N`: a seeded search that shrinks a failure to a reproducer that runs.

The broken plugins whose searches are judged on their own findings are searched in one run (``searched``): one
command and one forkserver for all of them, each implementation's search in its own worker as always."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # subprocesses and workers that import torch: not in the inner loop

PLUGINS = Path(__file__).parent / "plugins"
SEARCHED = ("broken_query_tail_from_keys", "broken_window_left_off_by_one", "broken_cache_len_off_by_one")
"""The plugins of the shared run: one to shrink and reproduce, two whose bugs need a declared structure."""


def _fuzz(attnbench, tmp: Path, plugin: str, *extra: str) -> tuple[int, dict, str]:
    out = tmp / "fuzz.json"
    run = attnbench("verify", "--plugin", str(PLUGINS / f"{plugin}.py"), "--only", plugin, "--fuzz", "200",
                    "--json", str(out), "--force", *extra, timeout=900)
    return run.returncode, json.loads(out.read_text()), run.stderr


@pytest.fixture(scope="module")
def searched(tmp_path_factory: pytest.TempPathFactory, attnbench) -> tuple[int, dict[str, dict], str]:
    """One ``verify --fuzz 200`` (seed 0) over :data:`SEARCHED`: its exit status, each plugin's cell, its stderr."""
    out = tmp_path_factory.mktemp("searched") / "fuzz.json"
    plugins = [arg for name in SEARCHED for arg in ("--plugin", str(PLUGINS / f"{name}.py"))]
    run = attnbench("verify", *plugins, "--only", ",".join(SEARCHED), "--fuzz", "200", "--json", str(out), "--force",
                    timeout=900)
    cells = json.loads(out.read_text())["cells"]
    assert sorted(c["implementation"] for c in cells) == sorted(SEARCHED), run.stderr  # one cell per search
    return run.returncode, {c["implementation"]: c for c in cells}, run.stderr


def test_a_failure_shrinks_to_a_minimal_case_whose_reproducer_shows_it(tmp_path: Path, searched) -> None:
    code, cells, err = searched
    assert code == 1, err
    cell = cells["broken_query_tail_from_keys"]
    assert cell["check"] == "fuzz" and cell["status"] == "fail"
    case = cell["case"]
    assert case["batch"] == 1 and case["heads"] == 1 and case["d"] == 1 and case["tq"] <= 2, cell["case_id"]
    assert case["mask"] == "none" and case["layout"] == "contiguous" and case["inputs"] == "randn"
    reproducer = cell["metrics"]["reproducer"]
    assert reproducer in err  # printed for copy and paste
    script = tmp_path / "reproduce.py"
    script.write_text(reproducer)
    shown = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith(cell["case_id"]) and "max|err|" in shown.stdout and "> bound" in shown.stdout


def test_the_search_is_seeded_and_a_found_case_is_replayed_first(tmp_path: Path, attnbench) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    _, a, _ = _fuzz(attnbench, first, "broken_pointer_cache", "--fuzz-seed", "7")
    _, b, _ = _fuzz(attnbench, second, "broken_pointer_cache", "--fuzz-seed", "7")
    assert a["cells"][0]["case_id"] == b["cells"][0]["case_id"]
    assert "property:stateful" in a["cells"][0]["reason"]
    assert json.loads((first / ".hypothesis" / "broken_pointer_cache.json").read_text()) == [a["cells"][0]["case"]]
    _, again, _ = _fuzz(attnbench, first, "broken_pointer_cache", "--fuzz-seed", "7")
    assert again["cells"][0]["metrics"]["replayed"] is True and again["cells"][0]["metrics"]["examples"] == 0


def test_a_correct_implementation_survives_the_search(tmp_path: Path, attnbench) -> None:
    code, data, err = _fuzz(attnbench, tmp_path, "unusual_logsumexp")
    assert code == 0, err
    [cell] = data["cells"]
    assert cell["status"] == "pass" and cell["metrics"]["examples"] >= 100


@pytest.mark.parametrize(("plugin", "field"), [("broken_window_left_off_by_one", "window"),
                                               ("broken_cache_len_off_by_one", "cache_seqlens")])
def test_the_search_draws_the_structures_an_implementation_declares(plugin: str, field: str, searched) -> None:
    code, cells, err = searched
    assert code == 1, err
    cell = cells[plugin]
    assert cell["status"] == "fail" and cell["case"][field] is not None, cell["case_id"]
