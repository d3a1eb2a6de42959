"""A full disk mid-run: exit 2 and one line naming the file, what was kept and how to go on; never a traceback,
never a half-written file, and a report written whole or not at all.

The disk fills for real, at a moment the test chooses: a plugin fills it from inside its call. Two ways, so the
test runs with or without root: a small tmpfs the plugin fills to the last byte (ENOSPC), and the command's own
file-size limit, which the plugin lowers with prlimit (EFBIG, what a quota or `ulimit -f` gives).
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # subprocesses and workers that import torch: not in the inner loop

BOUND_S = 300.0
DATA = Path(__file__).resolve().parents[1] / "data" / "schema_v1"

FILLER = '''
import os, resource
import numpy as np
from harness import register

HOW, WHERE = {how!r}, {where!r}


def _command_pid():
    """The attnbench process: the outermost of this worker's ancestors that run attnbench's code (the command,
    its forkserver: a new interpreter, or the command forked)."""
    def parent(pid):
        return int(open(f"/proc/{{pid}}/stat").read().rsplit(")", 1)[1].split()[1])

    pid = os.getppid()
    while b"harness" in open(f"/proc/{{parent(pid)}}/cmdline", "rb").read():
        pid = parent(pid)
    return pid


def fill_disk():
    if HOW == "fsize":  # the command may write no file beyond one byte from now on
        resource.prlimit(_command_pid(), resource.RLIMIT_FSIZE, (1, resource.RLIM_INFINITY))
        return
    with open(os.path.join(WHERE, "filler"), "ab") as f:  # every byte the tmpfs has left
        try:
            while True:
                f.write(b"x" * 65536)
                f.flush()
        except OSError:
            pass
    with open(os.path.join(WHERE, "filler"), "ab") as f:
        try:
            while True:
                f.write(b"x")
                f.flush()
        except OSError:
            pass


calls = 0


@register("fills_disk", backend="numpy")
def fills_disk(q, k, v, *, causal=False, mask=None, scale=None):
    global calls
    calls += 1
    if q.shape[-2] == {at_t} or calls == {at_call}:
        fill_disk()
    s = q @ np.swapaxes(k, -1, -2) * (q.shape[-1] ** -0.5 if scale is None else scale)
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True) @ v).astype(q.dtype)
'''


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs (root only; skipped where mounting is not allowed)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    try:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True)
    except OSError:
        pytest.skip("no mount command here")
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode(errors='replace').strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


@pytest.fixture(params=["tmpfs", "fsize"])
def disk(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, Path]:
    if request.param == "tmpfs":
        return "tmpfs", request.getfixturevalue("small_disk")
    where = tmp_path / "out"
    where.mkdir()
    return "fsize", where


def _plugin(tmp_path: Path, how: str, where: Path, at_t: int = -1, at_call: int = -1) -> Path:
    path = tmp_path / "fills_disk.py"
    path.write_text(FILLER.format(how=how, where=str(where), at_t=at_t, at_call=at_call))
    return path


def _file_size_limit(limit: int | None) -> Callable[[], None] | None:
    """The child's file-size limit (``ulimit -f``), lowered before it starts: every file it writes past
    ``limit`` bytes fails with EFBIG, as on a full quota."""
    if limit is None:
        return None
    return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))


def _one_error_line(err: str) -> str:
    assert "Traceback" not in err and "internal error" not in err, err
    lines = [line for line in err.splitlines() if ": error:" in line]
    assert len(lines) == 1, err
    return lines[0]


def _no_debris(directory: Path) -> None:
    left = [p.name for p in directory.iterdir() if p.name.endswith((".tmp", ".lock")) or p.name.startswith(".partial")]
    assert left == [], f"left behind: {left}"


def test_bench_on_a_full_disk_keeps_what_it_wrote_and_says_how_to_resume(tmp_path: Path, disk: tuple[str, Path], attnbench) -> None:
    how, where = disk
    out = where / "run.json"
    plugin = _plugin(tmp_path, how, where, at_t=32)
    done = attnbench("bench", "--plugin", str(plugin), "--only", "fills_disk", "--T", "16", "32", "--heads", "1",
                      "--d", "8",
                      "--roof-budget", "0.01", "--budget", "0.01", "--min-samples", "2", "--no-memory", "--quiet", "--threads", "1",
                      "--out", str(out))
    assert done.returncode == 2, done.stderr
    line = _one_error_line(done.stderr)
    assert str(out) in line and "1 cells are in" in line and f"attnbench bench --resume {out}" in line, line
    data = json.loads(out.read_text())  # valid, as last written: the T=16 cell
    assert not data["complete"] and [c["case"]["tq"] for c in data["cells"]] == [16]
    _no_debris(where)


def test_verify_on_a_full_disk_keeps_what_it_wrote(tmp_path: Path, disk: tuple[str, Path], attnbench) -> None:
    how, where = disk
    out = where / "v.json"
    plugin = _plugin(tmp_path, how, where, at_call=60)
    done = attnbench("verify", "--plugin", str(plugin), "--only", "fills_disk", "--suite", "small", "--json", str(out))
    assert done.returncode == 2, done.stderr
    line = _one_error_line(done.stderr)
    assert str(out) in line and "checks are in" in line and "run the same command again" in line, line
    assert not json.loads(out.read_text())["complete"]
    _no_debris(where)


@pytest.mark.parametrize("how", ["tmpfs", "fsize"])
def test_report_on_a_full_disk_writes_no_partial_set(tmp_path: Path, how: str,
                                                     request: pytest.FixtureRequest, attnbench) -> None:
    bench = tmp_path / "bench.json"
    shutil.copy(DATA / "main-job-bench.json", bench)
    if how == "tmpfs":
        where = request.getfixturevalue("small_disk")
        with open(where / "filler", "wb") as f:  # leave about 100 KiB: the tables fit, the figures do not
            f.write(b"x" * (2 * 2**20 - 100 * 2**10))
        limit = None
    else:
        where, limit = tmp_path / "disk", 20_000  # a table fits under the file-size limit, a figure does not
        where.mkdir()
    out = where / "report"
    done = attnbench("report", str(bench), "--out", str(out), preexec_fn=_file_size_limit(limit))
    assert done.returncode == 2, done.stderr
    line = _one_error_line(done.stderr)
    assert str(out) in line and "not changed" in line, line
    assert sorted(os.listdir(out)) == [], "a partial report was left"
