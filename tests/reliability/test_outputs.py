"""Result files are never clobbered or interleaved, bad paths are usage errors, stdout stays the answer."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from gates import BOUND_S, finish, pid_alive, plugin_file, release, wait_started

from harness.results import load_results

pytestmark = pytest.mark.slow  # subprocesses and workers that import torch: not in the inner loop

FAST = ["--T", "16", "--heads", "1", "--d", "8",
        "--roof-budget", "0.01", "--budget", "0.01", "--min-samples", "2", "--no-memory", "--quiet",
        "--threads", "1"]
QUICK_BENCH = ["bench", "--only", "numpy_naive", *FAST]


@pytest.fixture(scope="module")
def bench_file(tmp_path_factory: pytest.TempPathFactory, attnbench) -> Path:
    """A complete result file of :data:`QUICK_BENCH`, written once for the tests that start from one (each copies
    it, or only reads it)."""
    out = tmp_path_factory.mktemp("bench") / "bench.json"
    code, _, err = attnbench.outcome(*QUICK_BENCH, "--out", str(out))
    assert code == 0, err
    return out


@pytest.mark.parametrize("content", ["notes I care about\n", json.dumps({"my": "config"})])
def test_out_refuses_to_overwrite_a_file_that_is_not_a_bench_result(tmp_path: Path, content: str, attnbench) -> None:
    victim = tmp_path / "precious.json"
    victim.write_text(content)
    code, _, err = attnbench.outcome(*QUICK_BENCH, "--out", str(victim))
    assert code == 2 and "refusing to overwrite" in err and "--force" in err, err
    assert victim.read_text() == content
    code, _, err = attnbench.outcome(*QUICK_BENCH, "--out", str(victim), "--force")
    assert code == 0, err
    assert load_results(victim)["command"] == "bench"


def test_a_verify_result_is_not_overwritten_by_bench_but_a_bench_result_is(tmp_path: Path, bench_file: Path,
                                                                             attnbench) -> None:
    verify_file = tmp_path / "verify.json"
    code, _, err = attnbench.outcome("verify", "--only", "numpy_naive", "--suite", "small", "--trials", "1", "--json",
                        str(verify_file))
    assert code == 0, err
    before = verify_file.read_bytes()
    code, _, err = attnbench.outcome(*QUICK_BENCH, "--out", str(verify_file))
    assert code == 2 and "is an attnbench verify result file" in err
    assert verify_file.read_bytes() == before
    ours = tmp_path / "bench.json"
    shutil.copyfile(bench_file, ours)  # a bench result file QUICK_BENCH wrote
    first = load_results(ours)["run_id"]
    assert attnbench.outcome(*QUICK_BENCH, "--out", str(ours))[0] == 0  # a re-run replaces its own kind of file
    assert load_results(ours)["complete"] and load_results(ours)["run_id"] == first


@pytest.mark.parametrize("where", ["directory", "under_a_file"])
def test_an_unwritable_out_is_one_line_and_exit_2(tmp_path: Path, where: str, attnbench) -> None:
    (tmp_path / "file").write_text("x")
    target = tmp_path if where == "directory" else tmp_path / "file" / "run.json"
    for args in ([*QUICK_BENCH, "--out", str(target)],
                 ["verify", "--only", "numpy_naive", "--suite", "small", "--json", str(target)]):
        code, _, err = attnbench.outcome(*args)
        assert code == 2 and "Traceback" not in err, err
        assert len(err.strip().splitlines()) == 1 and str(target) in err


MARKS_IMPORT = '''
import pathlib
pathlib.Path(__file__).with_name("imported").write_text("yes")
from harness import register


@register("marks_import", backend="numpy")
def marks_import(q, k, v, *, causal=False, mask=None, scale=None):
    return q
'''


@pytest.mark.parametrize("where", ["not_ours", "under_a_file", "locked"])
def test_an_out_it_cannot_use_is_refused_before_any_plugin_loads(tmp_path: Path, where: str, attnbench) -> None:
    """bench --out and verify --json are checked first: a bad path costs the user a second, and no plugin's code
    runs for a run that cannot keep its results."""
    plugin = plugin_file(tmp_path, MARKS_IMPORT, "marks.py")
    (tmp_path / "file").write_text("x")
    target = {"not_ours": tmp_path / "file", "under_a_file": tmp_path / "file" / "run.json",
              "locked": tmp_path / "run.json"}[where]
    if where == "locked":  # another run holds the file: its sidecar lock is taken (here by this test process)
        from harness.runtime.filelock import RunLock

        lock = RunLock.acquire(target)
    try:
        for args in (["bench", "--only", "marks_import", *FAST, "--out", str(target)],
                     ["verify", "--only", "marks_import", "--suite", "small", "--json", str(target)]):
            code, _, err = attnbench.outcome(*args, "--plugin", str(plugin))
            assert code == 2 and len(err.strip().splitlines()) == 1 and str(target) in err, err
            assert not (tmp_path / "imported").exists(), f"{args[0]} imported the plugin before refusing its output"
    finally:
        if where == "locked":
            lock.release()
    assert (tmp_path / "file").read_text() == "x"


GATED = '''
import numpy as np
from harness import register


@register("gated", backend="numpy")
def gated(q, k, v, *, causal=False, mask=None, scale=None):
    gate("call")
    s = q @ np.swapaxes(k, -1, -2) * (q.shape[-1] ** -0.5 if scale is None else scale)
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True) @ v).astype(q.dtype)
'''


def test_two_runs_on_one_out_the_second_refuses_and_the_first_loses_nothing(tmp_path: Path, attnbench) -> None:
    plugin = plugin_file(tmp_path, GATED)
    out = tmp_path / "shared.json"
    first = attnbench.start("bench", "--only", "gated", *FAST, "--plugin", str(plugin), "--out", str(out))
    wait_started(tmp_path, "call", first)  # the first run holds the file and is mid-cell
    code, _, err = attnbench.outcome(*QUICK_BENCH, "--out", str(out))
    assert code == 2 and "being written by another attnbench run" in err and f"pid {first.pid}" in err, err
    release(tmp_path, "call")
    code, _, err = finish(first)
    assert code == 0, err
    data = load_results(out)
    assert data["complete"] and [c["implementation"] for c in data["cells"]] == ["gated"]
    assert attnbench.outcome(*QUICK_BENCH, "--out", str(out))[0] == 0  # free again once the first run ended


CHATTY = '''
import os
import numpy as np
from harness import register

print("chatty: imported")


def _available(case):
    print("chatty: checking availability")
    return None


@register("chatty", backend="numpy", available=_available)
def chatty(q, k, v, *, causal=False, mask=None, scale=None):
    print("chatty: called")
    os.write(1, b"chatty: raw write to fd 1\\n")
    s = q @ np.swapaxes(k, -1, -2) * (q.shape[-1] ** -0.5 if scale is None else scale)
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True) @ v).astype(q.dtype)
'''


def test_a_plugins_prints_never_reach_the_json_on_stdout(tmp_path: Path, attnbench) -> None:
    plugin = plugin_file(tmp_path, CHATTY)
    code, stdout, err = attnbench.outcome("verify", "--plugin", str(plugin), "--only", "chatty", "--suite", "small",
                             "--trials", "1", "--json", "-")
    assert code == 0, err
    assert json.loads(stdout)["cells"] and "chatty: called" in err and "chatty: raw write" in err
    code, stdout, err = attnbench.outcome("bench", "--only", "chatty", *FAST, "--plugin", str(plugin), "--json",
                             "--out", str(tmp_path / "b.json"))
    assert code == 0, err
    assert json.loads(stdout)["cells"][0]["status"] == "ok" and "chatty: imported" in err
    code, stdout, err = attnbench.outcome("list", "chatty", "--plugin", str(plugin), "--json")
    assert code == 0 and "chatty: checking availability" in err
    json.loads(stdout)


def test_a_worker_dies_quietly_with_its_killed_parent(tmp_path: Path, attnbench) -> None:
    plugin = plugin_file(tmp_path, GATED)
    proc = attnbench.start("bench", "--only", "gated", *FAST, "--plugin", str(plugin), "--out", str(tmp_path / "k.json"))
    worker = wait_started(tmp_path, "call", proc)
    assert worker != proc.pid
    proc.send_signal(signal.SIGKILL)
    _, err = proc.communicate(timeout=BOUND_S)  # returns once the worker, which shares stderr, is gone too
    deadline = time.monotonic() + BOUND_S
    while pid_alive(worker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pid_alive(worker), "the orphaned worker is still running"
    assert "Traceback" not in err and "BrokenPipeError" not in err
    release(tmp_path, "call")


def test_help_everywhere_and_a_bare_command_is_usage(attnbench) -> None:
    for args in (["--help"], *([name, "--help"] for name in ("list", "verify", "bench", "report", "compare", "run"))):
        code, stdout, err = attnbench.outcome(*args)
        assert code == 0 and "usage: attnbench" in stdout, (args, err)
    code, stdout, err = attnbench.outcome()
    assert code == 2 and "usage: attnbench" in err


def test_help_imports_nothing_heavy() -> None:
    """What keeps `attnbench --help` instant and Ctrl-C handled before torch's start-up: checked, not timed."""
    probe = ("import contextlib, io, sys\nfrom harness.cli import main\n"
             "with contextlib.redirect_stdout(io.StringIO()):\n"
             "    for argv in (['--help'], ['bench', '--help'], ['list', '--help'], ['verify', '--help'], ['run', '--help']):\n"
             "        try:\n            main(argv)\n        except SystemExit:\n            pass\n"
             "print(sorted(m for m in ('torch', 'pandas', 'matplotlib', 'scipy', 'ray') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=BOUND_S)
    assert out.stdout.strip() == "[]", out.stderr


def test_a_malformed_result_file_is_never_reported_as_a_regression(tmp_path: Path, bench_file: Path,
                                                                   attnbench) -> None:
    good = bench_file
    data = json.loads(good.read_text())
    for cell in data["cells"]:
        cell["stats"] = "garbage"
        cell["samples_s"] = {"not": "a list"}
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps(data))
    code, _, err = attnbench.outcome("compare", str(good), str(broken))
    assert code not in (0, 1), err  # 1 means "regression found": a crash must never say that
