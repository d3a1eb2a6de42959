"""Worker isolation for real: a crash, a hang and an exception each cost one task, never the run."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.runtime.isolation import CRASH, ERROR, OK, OUT_OF_MEMORY, TIMEOUT, Task, WorkerPool, run_isolated


def square(x: int) -> int:
    return x * x


def abort() -> None:
    os.abort()


def hang() -> None:
    time.sleep(3600)


def fail() -> None:
    raise ValueError("bad shape (B, H) expected")


def pid() -> int:
    return os.getpid()


_HELD: list[bytearray] = []


def leak(mib: int) -> tuple[int, int]:
    """A plugin that keeps ``mib`` MiB more on every call: this worker's pid and how many blocks it holds."""
    _HELD.append(bytearray(mib << 20))
    return os.getpid(), len(_HELD)


def test_a_worker_that_leaks_per_call_is_stopped_by_its_own_cap_and_the_next_task_gets_a_fresh_one() -> None:
    """docs/isolation.md, Memory: the leak ends in the worker as an out-of-memory outcome that says the cap, not as
    the machine's OOM killer picking a process; what leaked stays with that worker, so the next task starts clean."""
    with WorkerPool(timeout=60, memory_limit=512 << 20) as pool:
        outcomes = [pool.run(Task(i, leak, (64,))) for i in range(12)]
        failed = next(i for i, o in enumerate(outcomes) if o.status != OK)
        assert 1 <= failed < 9, [o.status for o in outcomes]  # 8 x 64 MiB fill the 512 MiB cap with the interpreter
        oom = outcomes[failed]
        assert oom.status == ERROR and oom.error.startswith(OUT_OF_MEMORY) and "0.50 GiB" in oom.error, oom.error
        after = outcomes[failed + 1]
        assert after.status == OK and after.value[1] == 1, after  # a fresh worker: one block, its own
        assert after.value[0] != outcomes[0].value[0]


def test_crash_hang_and_error_are_outcomes_and_later_tasks_still_run() -> None:
    tasks = [Task("a", square, (3,)), Task("crash", abort), Task("b", square, (4,)),
             Task("hang", hang, timeout=2), Task("error", fail), Task("c", square, (5,))]
    seen: dict[str, object] = {}
    run_isolated(tasks, lambda task, outcome: seen.__setitem__(task.key, outcome), timeout=30)
    assert seen["a"].status == OK and seen["a"].value == 9
    assert seen["crash"].status == CRASH and "SIGABRT" in seen["crash"].error
    assert seen["b"].status == OK and seen["b"].value == 16
    assert seen["hang"].status == TIMEOUT and "2 s" in seen["hang"].error
    assert seen["error"].status == ERROR and seen["error"].error == "ValueError: bad shape (B, H) expected"
    assert seen["c"].status == OK and seen["c"].value == 25


def test_tasks_share_one_worker_until_it_dies() -> None:
    pids: list[int] = []
    run_isolated([Task(i, pid) for i in range(3)], lambda t, o: pids.append(o.value))
    assert len(set(pids)) == 1 and pids[0] != os.getpid()


SCRIPT = """
import json, sys
from pathlib import Path
from harness.cli import main
out = Path(sys.argv[1])
with open(out.with_suffix(".runs"), "a") as runs:  # once per process that runs this script
    runs.write("ran\\n")
code = main(["verify", "--only", "numpy_naive", "--suite", "small", "--trials", "1", "--json", str(out)])
print(code, sorted({c["status"] for c in json.loads(out.read_text())["cells"]}))
"""


@pytest.mark.slow  # a verify command in a child process
@pytest.mark.parametrize("how", ["stdin", "file"])
def test_a_script_that_calls_attnbench_is_not_run_again_by_its_workers(tmp_path: Path, how: str) -> None:
    """A script read from stdin (no file to run again) and one with no ``__main__`` guard: the workers never run
    the caller's script, so neither every case crashes nor the script runs once per worker."""
    out = tmp_path / "v.json"
    script = tmp_path / "unguarded.py"
    script.write_text(SCRIPT)
    argv = [sys.executable, "-"] if how == "stdin" else [sys.executable, str(script)]
    done = subprocess.run([*argv, str(out)], input=SCRIPT if how == "stdin" else None, capture_output=True,
                          text=True, timeout=300, cwd=tmp_path)
    assert done.stdout.strip().splitlines()[-1] == "0 ['pass']", done.stdout[-2000:] + done.stderr[-2000:]
    assert out.with_suffix(".runs").read_text() == "ran\n"



HEAP_PLUGIN = """
import ctypes, os, re
from harness import register

@register("heap_report", backend="numpy", description="says whether malloc gives its worker huge pages, then fails")
def heap_report(q, k, v, *, causal=False, mask=None, scale=None):
    def huge_kib():
        with open("/proc/self/smaps") as f:
            return sum(int(x) for x in re.findall(r"AnonHugePages:\\s+(\\d+)", f.read()))
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    before = huge_kib()
    block = libc.malloc(64 * 2**20)
    ctypes.memset(block, 1, 64 * 2**20)
    grew = huge_kib() - before
    libc.free(ctypes.c_void_p(block))
    raise RuntimeError(f"huge pages: {grew >= 32 * 1024}; sees {os.environ.get('GLIBC_TUNABLES')!r}")
"""


def _transparent_huge_pages() -> bool:
    try:
        mode = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text()
    except OSError:
        return False
    return "[always]" in mode or "[madvise]" in mode


@pytest.mark.slow  # a bench command in a child process
@pytest.mark.skipif(not sys.platform.startswith("linux") or os.confstr("CS_GNU_LIBC_VERSION") is None
                    or not _transparent_huge_pages(),
                    reason="glibc's malloc tunables on a kernel with transparent huge pages only")
def test_bench_workers_malloc_on_huge_pages_and_the_plugin_sees_the_callers_environment(
        tmp_path: Path, attnbench) -> None:
    """The command execs itself once with glibc's huge-page tunable, so the forkserver forked from it gives every
    timing worker that heap (a plain malloc of 64 MiB lands on huge pages); the plugin's environment is the
    caller's, its tunables kept and none of ours added."""
    plugin = tmp_path / "heap.py"
    plugin.write_text(HEAP_PLUGIN)
    out = tmp_path / "b.json"
    done = attnbench("bench", "--plugin", str(plugin), "--only", "heap_report", "--T", "64", "--heads", "1", "--d",
                     "16", "--mode", "fwd", "--roof-budget", "0.01", "--budget", "0.05", "--no-memory", "--quiet",
                     "--out", str(out), env={"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"})
    import json

    (cell,) = json.loads(out.read_text())["cells"]
    assert cell["status"] == "error", done.stderr[-2000:]
    assert "huge pages: True; sees 'glibc.malloc.arena_max=2'" in cell["reason"], cell["reason"]
