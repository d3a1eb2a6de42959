"""SIGTERM (what `timeout`, `kill` and a CI cancellation send) and SIGHUP (a closed terminal) stop a command as
Ctrl-C does: the cells measured kept, one line saying how to finish, the lock and temporary files removed, and the
conventional status 128 + the signal's number (143, 129). The signal lands mid-cell by construction (a gated plugin)."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
from gates import finish, plugin_file, release, wait_started
from test_interrupts import BENCH, GATED_AT_CALL_60, GATED_AT_T128

from harness.results import load_results

pytestmark = pytest.mark.slow  # subprocesses and workers that import torch: not in the inner loop

SIGNALS = [(signal.SIGTERM, 143), (signal.SIGHUP, 129)]


def _tmp(tmp_path: Path) -> Path:
    path = tmp_path / "tmpdir"
    path.mkdir(exist_ok=True)
    return path


def _leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith((".lock", ".tmp")))


@pytest.mark.parametrize(("signum", "code"), SIGNALS, ids=["SIGTERM", "SIGHUP"])
def test_bench_stopped_by_a_signal_keeps_its_cells_and_says_how_to_finish(tmp_path: Path, signum: int,
                                                                          code: int, attnbench) -> None:
    plugin = plugin_file(tmp_path, GATED_AT_T128)
    out = tmp_path / "run.json"
    proc = attnbench.start(*BENCH, "--plugin", str(plugin), "--out", str(out), env={"TMPDIR": str(_tmp(tmp_path))})
    try:
        wait_started(tmp_path, "cell", proc)  # the T=64 cell is recorded; T=128 is running
        proc.send_signal(signum)
        status, _, err = finish(proc)
    finally:
        release(tmp_path, "cell")
    assert status == code, err
    lines = [line for line in err.splitlines() if ": interrupted" in line]
    assert len(lines) == 1 and signal.Signals(signum).name in lines[0] and "Traceback" not in err, err
    assert "1 cells are in" in lines[0] and f"attnbench bench --resume {out}" in lines[0]
    data = load_results(out)
    assert not data["complete"] and [c["case"]["tq"] for c in data["cells"]] == [64]
    assert _leftovers(tmp_path) == [], "a lock or temporary file outlived the run"


@pytest.mark.parametrize(("signum", "code"), SIGNALS, ids=["SIGTERM", "SIGHUP"])
def test_verify_to_stdout_stopped_by_a_signal_leaves_no_temporary_result(tmp_path: Path, signum: int,
                                                                         code: int, attnbench) -> None:
    plugin = plugin_file(tmp_path, GATED_AT_CALL_60)
    proc = attnbench.start("verify", "--plugin", str(plugin), "--only", "gated", "--suite", "small",
                      "--json", "-", env={"TMPDIR": str(_tmp(tmp_path))})
    try:
        wait_started(tmp_path, "cell", proc)
        proc.send_signal(signum)
        status, stdout, err = finish(proc)
    finally:
        release(tmp_path, "cell")
    assert status == code, err
    assert sum(": interrupted" in line for line in err.splitlines()) == 1 and "Traceback" not in err, err
    assert "nothing was kept" in err and stdout == ""
    assert not [p for p in _tmp(tmp_path).iterdir() if p.name.startswith("attnbench-")], "temporary result left"


def test_verify_to_a_file_stopped_by_sigterm_keeps_its_checks(tmp_path: Path, attnbench) -> None:
    plugin = plugin_file(tmp_path, GATED_AT_CALL_60)
    out = tmp_path / "v.json"
    proc = attnbench.start("verify", "--plugin", str(plugin), "--only", "gated", "--suite", "small",
                      "--json", str(out), env={"TMPDIR": str(_tmp(tmp_path))})
    try:
        wait_started(tmp_path, "cell", proc)
        proc.send_signal(signal.SIGTERM)
        status, _, err = finish(proc)
    finally:
        release(tmp_path, "cell")
    assert status == 143, err
    assert f"are in {out} (complete: false)" in err
    data = json.loads(out.read_text())
    assert data["cells"] and all(c["status"] != "crash" for c in data["cells"]), "a killed worker became a crash"
    assert _leftovers(tmp_path) == []




def test_a_hang_up_ignored_by_nohup_stays_ignored(tmp_path: Path, attnbench) -> None:
    plugin = plugin_file(tmp_path, GATED_AT_T128)
    out = tmp_path / "run.json"
    proc = attnbench.start(*BENCH, "--plugin", str(plugin), "--out", str(out), cwd=tmp_path, prefix=("nohup",))
    try:
        wait_started(tmp_path, "cell", proc)
        proc.send_signal(signal.SIGHUP)
    finally:
        release(tmp_path, "cell")
    status, _, err = finish(proc)
    assert status == 0, err
    assert load_results(out)["complete"]
