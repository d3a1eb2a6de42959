"""Ctrl-C as a terminal sends it: to the whole process group, helper processes included.

A terminal's Ctrl-C reaches every process of the foreground group: attnbench, its forkserver
and its workers. Only attnbench may answer it (exit 130, one "interrupted" line); a helper
must never print a ``KeyboardInterrupt`` traceback of its own. The signal lands while a helper
is starting up by construction: a ``sitecustomize`` module (imported by every interpreter at
start-up) stops the forkserver at a gate until the test has sent SIGINT to the group; where the command forks
its forkserver instead, a fork handler it registers in the command does.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from gates import BOUND_S, finish, release, wait_started

pytestmark = pytest.mark.slow  # subprocesses and workers that import torch: not in the inner loop

SITECUSTOMIZE = '''
import os
import pathlib
import time

_GATES = pathlib.Path({gates!r})


def _command_line():
    try:
        return pathlib.Path("/proc/self/cmdline").read_bytes().replace(b"\\0", b" ").decode()
    except OSError:
        return ""


def _gate():
    try:  # the first helper stops here; any later one goes on
        _fd = os.open(_GATES / "helper.started", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return
    os.write(_fd, str(os.getpid()).encode())
    os.close(_fd)
    _deadline = time.monotonic() + {bound}
    while not (_GATES / "helper.release").exists() and time.monotonic() < _deadline:
        time.sleep(0.02)


_FORKS = [0]


def _forked(level):
    def handler():  # inherited by forks of forks: counts how many forks deep this process is
        _FORKS[0] += 1
        if _FORKS[0] == level:
            _gate()
    return handler


if {marker!r} in _command_line():  # a forkserver started as a new interpreter; its forks are workers
    if {at!r} == "server":
        _gate()
    else:
        os.register_at_fork(after_in_child=_forked(1))
elif "-m harness" in _command_line():  # the command: its one fork is a forkserver, whose forks are workers
    os.register_at_fork(after_in_child=_forked(1 if {at!r} == "server" else 2))
'''

FORKSERVER = "from multiprocessing.forkserver import main"


def _group_interrupted(attnbench, tmp_path: Path, *argv: str, at: str = "server") -> tuple[int, str, str]:
    """Run attnbench in its own process group, SIGINT the group while its forkserver (``at="server"``) or its
    first worker (``"worker"``) starts up."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE.format(gates=str(tmp_path), marker=FORKSERVER, bound=BOUND_S,
                                                                at=at))
    path = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
    proc = attnbench.start(*argv, env={"PYTHONPATH": path}, new_session=True)
    try:
        wait_started(tmp_path, "helper", proc)
        os.killpg(proc.pid, signal.SIGINT)  # what a terminal does: every process of the group gets it
    finally:
        release(tmp_path, "helper")
    return finish(proc)


def _interrupted_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if "interrupted" in line]


def test_ctrl_c_to_the_group_while_verify_starts_its_helpers_is_one_clean_line(tmp_path: Path, attnbench) -> None:
    out = tmp_path / "v.json"
    code, _, err = _group_interrupted(attnbench, tmp_path, "verify", "--only", "numpy_naive", "--suite", "small",
                                      "--json", str(out))
    assert code == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert len(_interrupted_lines(err)) == 1, err


def test_ctrl_c_to_the_group_during_runs_verify_is_one_line_with_the_real_paths(tmp_path: Path, attnbench) -> None:
    results = tmp_path / "results"
    code, _, err = _group_interrupted(attnbench, tmp_path, "run", "--only", "numpy_naive", "--results-dir", str(results),
                                      "--reports-dir", str(tmp_path / "reports"), at="worker")  # verify's file exists
    assert code == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    [line] = _interrupted_lines(err)
    [verify_file] = results.glob("*-verify.json")
    bench_file = results / verify_file.name.replace("-verify.json", "-bench.json")
    assert "<run-id>" not in line and f"--out {bench_file}" in line, line
    assert f"attnbench report {verify_file} {bench_file}" in line, line
