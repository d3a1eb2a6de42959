"""Plugin code never runs in the command's own process, nothing it starts outlives its worker, and a worker
cannot take the machine's memory: each with a real process, a real exit, a real segfault, a real hang, real
children and grandchildren (one of them in a session of its own), and a real allocation past the worker's cap.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # subprocesses and workers that import torch: not in the inner loop


KERNEL = '''
import ctypes, os, subprocess, sys, time
import numpy as np
from harness import register

MARK = {mark!r}


def _attend(q, k, v, causal=False, mask=None, scale=None):
    s = q @ np.swapaxes(k, -1, -2) * (q.shape[-1] ** -0.5 if scale is None else scale)
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True) @ v).astype(q.dtype)


def _sleeper():
    """A process that would run for ten minutes, found again by the mark on its command line."""
    return [sys.executable, "-c", "import time; time.sleep(600)", MARK]
'''

AVAILABLE = KERNEL + '''

def exits(case):
    os._exit(0)


def segfaults(case):
    ctypes.string_at(0)


def hangs(case):
    time.sleep(600)


@register("avail_exits", backend="numpy", available=exits)
def avail_exits(q, k, v, *, causal=False, mask=None, scale=None):
    return _attend(q, k, v, causal, mask, scale)


@register("avail_segfaults", backend="numpy", available=segfaults)
def avail_segfaults(q, k, v, *, causal=False, mask=None, scale=None):
    return _attend(q, k, v, causal, mask, scale)


@register("avail_hangs", backend="numpy", available=hangs)
def avail_hangs(q, k, v, *, causal=False, mask=None, scale=None):
    return _attend(q, k, v, causal, mask, scale)
'''

FORKS = KERNEL + '''

_LEFT = []


@register("leaves_children", backend="numpy")
def leaves_children(q, k, v, *, causal=False, mask=None, scale=None):
    """A child holding the output pipes, and a daemon that double-forks into a session of its own: started by
    the first call of each worker (after a call's task, bench finds them; after a run, nothing may be left)."""
    if not _LEFT:
        _LEFT.append(subprocess.Popen(_sleeper()))
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                os.execv(sys.executable, _sleeper())
            os._exit(0)
    return _attend(q, k, v, causal, mask, scale)
'''

GREEDY = KERNEL + '''

@register("greedy", backend="numpy")
def greedy(q, k, v, *, causal=False, mask=None, scale=None):
    hoard = np.empty(64 << 30, dtype=np.uint8)  # 64 GiB of address space: far past any worker's cap here
    return _attend(q, k, v, causal, mask, scale) + hoard[:1].astype(q.dtype) * 0
'''

INHERITS = KERNEL + '''
import signal


@register("inherits_nothing", backend="numpy")
def inherits_nothing(q, k, v, *, causal=False, mask=None, scale=None):
    """Raises if its worker holds a file of the command's output folder (MARK) or runs a handler the command set."""
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{{fd}}")
        except OSError:
            continue
        if MARK in target:
            raise RuntimeError(f"the worker holds the command's file {{target}} (fd {{fd}})")
    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1):
        handler = signal.getsignal(signum)
        if callable(handler) and getattr(handler, "__module__", "").startswith("harness"):
            raise RuntimeError(f"the worker runs the command's handler for {{signum}}")
    return _attend(q, k, v, causal, mask, scale)
'''

BENCH = ["--T", "16", "--heads", "1", "--d", "8",
         "--roof-budget", "0.01", "--budget", "0.01", "--min-samples", "2", "--no-memory", "--quiet",
         "--threads", "1"]


def _plugin(tmp_path: Path, code: str, mark: str = "") -> Path:
    path = tmp_path / "plugin.py"
    path.write_text(code.format(mark=mark))
    return path


def _marked(mark: str) -> list[int]:
    """Live processes whose command line holds ``mark``."""
    found = []
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        try:
            if mark.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
                if state != "Z":
                    found.append(int(pid))
        except OSError:
            continue
    return found


def _kill(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, 9)
        except OSError:
            pass


HANG_LIMIT_S = "2"
"""``--timeout`` where a check hangs: the run waits it out whole, so it is short (the other checks end at once)."""
AVAILABLE_CHECKS = ("avail_exits", "avail_segfaults", "avail_hangs")


@pytest.fixture(scope="module")
def verified_checks(tmp_path_factory: pytest.TempPathFactory,
                    attnbench) -> tuple[subprocess.CompletedProcess[str], dict]:
    """One verify run of the three plugins whose ``available=`` check exits, segfaults or hangs (each in its own
    worker, as always): the process and its result file's document."""
    tmp = tmp_path_factory.mktemp("available")
    out = tmp / "v.json"
    done = attnbench("verify", "--plugin", str(_plugin(tmp, AVAILABLE)), "--only", ",".join(AVAILABLE_CHECKS),
                     "--suite", "small", "--trials", "1", "--timeout", HANG_LIMIT_S, "--json", str(out))
    return done, json.loads(out.read_text()) if out.exists() else {}


@pytest.mark.parametrize("name", AVAILABLE_CHECKS)
def test_verify_records_an_available_check_that_exits_crashes_or_hangs(name: str, verified_checks) -> None:
    done, data = verified_checks
    assert done.returncode == 1, (done.returncode, done.stderr[-2000:])  # a problem found, never 0 or 139
    assert data["complete"]
    statuses = {c["status"] for c in data["cells"] if c["implementation"] == name}
    assert statuses <= {"crash", "timeout"} and statuses, statuses
    assert "Traceback" not in done.stderr


def test_bench_records_an_available_check_that_segfaults(tmp_path: Path, attnbench) -> None:
    plugin = _plugin(tmp_path, AVAILABLE)
    out = tmp_path / "b.json"
    done = attnbench("bench", "--plugin", str(plugin), "--only", "avail_segfaults", *BENCH, "--out", str(out))
    assert done.returncode == 1, done.stderr[-2000:]
    (cell,) = json.loads(out.read_text())["cells"]
    assert cell["status"] == "crash" and "available= check" in cell["reason"] and "SIGSEGV" in cell["reason"]


def test_list_survives_an_available_check_that_exits(tmp_path: Path, attnbench) -> None:
    plugin = _plugin(tmp_path, AVAILABLE)
    done = attnbench("list", "--plugin", str(plugin), "avail_exits", "--json")
    assert done.returncode == 0, done.stderr[-2000:]
    (entry,) = json.loads(done.stdout)["implementations"]
    assert entry["available"] is False and "crash" in entry["reason"]


def test_verify_ends_with_no_process_of_the_plugin_left_and_no_pipe_held(tmp_path: Path, attnbench) -> None:
    mark = f"attnbench-orphan-{uuid.uuid4().hex}"
    plugin = _plugin(tmp_path, FORKS, mark)
    try:
        done = attnbench("verify", "--plugin", str(plugin), "--only", "leaves_children", "--suite", "small",
                          "--trials", "1", "--json", str(tmp_path / "v.json"))  # output captured: pipes a child holds
        assert done.returncode in (0, 1), done.stderr[-2000:]
        assert _marked(mark) == [], "processes the plugin started outlived the command"
    finally:
        _kill(_marked(mark))


def test_a_verify_worker_holds_no_file_of_the_command_and_runs_none_of_its_signal_handlers(tmp_path: Path,
                                                                                          attnbench) -> None:
    """Workers come from a server that was the command's process until it forked (it saves a second import of
    torch): it must carry nothing of the command's but the standard streams and the default signal handlers."""
    mark = f"attnbench-out-{uuid.uuid4().hex}"
    out = tmp_path / mark
    out.mkdir()
    held = (out / "held.txt").open("w")  # a descriptor the command inherits and would pass on
    try:
        done = attnbench("verify", "--plugin", str(_plugin(tmp_path, INHERITS, mark)), "--only", "inherits_nothing",
                         "--suite", "small", "--trials", "1", "--json", str(out / "v.json"), pass_fds=(held.fileno(),))
    finally:
        held.close()
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


def test_bench_makes_leftover_processes_a_violation_and_kills_them(tmp_path: Path, attnbench) -> None:
    mark = f"attnbench-orphan-{uuid.uuid4().hex}"
    plugin = _plugin(tmp_path, FORKS, mark)
    out = tmp_path / "b.json"
    try:
        done = attnbench("bench", "--plugin", str(plugin), "--only", "leaves_children", *BENCH, "--out", str(out))
        assert done.returncode == 1, done.stderr[-2000:]
        (cell,) = json.loads(out.read_text())["cells"]
        assert cell["status"] == "violation" and "still running after the task" in cell["reason"], cell["reason"]
        assert _marked(mark) == []
    finally:
        _kill(_marked(mark))


def test_an_allocation_past_the_worker_cap_is_out_of_memory_in_the_cell(tmp_path: Path, attnbench) -> None:
    plugin = _plugin(tmp_path, GREEDY)
    out = tmp_path / "b.json"
    done = attnbench("bench", "--plugin", str(plugin), "--only", "greedy", *BENCH, "--memory-budget", "1",
                      "--out", str(out))
    assert done.returncode == 1, done.stderr[-2000:]
    (cell,) = json.loads(out.read_text())["cells"]
    assert cell["status"] == "error" and cell["reason"].startswith("out of memory"), cell["reason"]
    assert "4.00 GiB" in cell["reason"], cell["reason"]  # the cap: the 1 GiB budget, 1 GiB of input sets, 2 GiB base


def test_list_bounds_an_available_check_that_hangs(tmp_path: Path, attnbench) -> None:
    plugin = _plugin(tmp_path, AVAILABLE)
    done = attnbench("list", "--plugin", str(plugin), "avail_hangs", "--json", "--timeout", HANG_LIMIT_S)
    assert done.returncode == 0, done.stderr[-2000:]
    (entry,) = json.loads(done.stdout)["implementations"]
    assert entry["available"] is False and "timeout" in entry["reason"]
