"""Every command reads and writes files one way: a result path that is not a regular file (a device, a FIFO,
a link to one, a file past the size cap) is refused before a byte is read; nothing is ever written through
a symbolic link (a planted lock sidecar, an output file or an output directory); every output is written
whole or not at all, never over an input of the same command or a file that is not that command's own kind
of output; and ``ab`` checks all of it before it times anything. Each refusal is exit 2 and one line naming
the file."""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import stat
import time
from pathlib import Path

import pytest
from gates import BOUND_S, plugin_file
from result_documents import bench_document, write

MAX_RESULT_BYTES = 2**30  # the documented cap (docs/results.md)

pytestmark = pytest.mark.slow  # real subprocesses of the command

FAST = ["--T", "16", "--heads", "1", "--d", "8",
        "--roof-budget", "0.01", "--budget", "0.01", "--min-samples", "2", "--no-memory", "--quiet",
        "--threads", "1"]
AB_FAST = ["--T", "16", "--heads", "1", "--d", "8", "--rounds", "1", "--calls", "1", "--threads", "1", "--quiet"]


def _bounded_memory() -> None:
    """A child that reads without end fails on its own memory (about 4 GiB), not the machine's."""
    resource.setrlimit(resource.RLIMIT_DATA, (4 * 2**30, 4 * 2**30))


def _one_line(err: str, *names: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert all(name in lines[0] for name in names), err
    return lines[0]


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    """Two bench result files (the second slower) and two of successive commits, for compare and report."""
    base = write(tmp_path / "base.json", bench_document())
    head = write(tmp_path / "head.json", bench_document(1.5))
    first, second = bench_document(), bench_document(1.5)
    first["environment"]["git_commit"], second["environment"]["git_commit"] = "aaa", "bbb"
    second["environment"]["time"] = "2026-01-02T00:00:00+00:00"
    return {"base": base, "head": head, "c1": write(tmp_path / "c1.json", first), "c2": write(tmp_path / "c2.json", second)}


# 1. result paths that are not regular files


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
@pytest.mark.parametrize("command", ["report", "compare"])
def test_a_device_as_a_result_file_is_refused_unread(tmp_path: Path, files: dict[str, Path], device: str,
                                                     command: str, attnbench) -> None:
    link = tmp_path / "run.json"
    link.symlink_to(device)
    args = [str(link), "--out", str(tmp_path / "rep")] if command == "report" else [str(files["base"]), str(link)]
    code, _, err = attnbench.outcome(command, *args, timeout=60, preexec_fn=_bounded_memory)
    assert code == 2, err
    _one_line(err, str(link), "not a regular file")


@pytest.mark.parametrize("command", ["report", "compare"])
def test_a_fifo_nobody_writes_is_refused_at_once(tmp_path: Path, files: dict[str, Path], command: str,
                                                  attnbench) -> None:
    fifo = tmp_path / "run.json"
    os.mkfifo(fifo)
    args = [str(fifo), "--out", str(tmp_path / "rep")] if command == "report" else [str(fifo), str(files["head"])]
    code, _, err = attnbench.outcome(command, *args, timeout=60)
    assert code == 2, err
    _one_line(err, str(fifo), "not a regular file")


def test_a_result_file_past_the_size_cap_is_refused_unread(tmp_path: Path, files: dict[str, Path], attnbench) -> None:
    huge = tmp_path / "huge.json"
    with open(huge, "wb") as f:  # sparse: no disk used, and nothing read
        f.truncate(MAX_RESULT_BYTES + 1)
    code, _, err = attnbench.outcome("compare", str(files["base"]), str(huge), timeout=60, preexec_fn=_bounded_memory)
    assert code == 2, err
    _one_line(err, str(huge), "larger than")


def test_bench_out_on_a_device_is_refused_before_anything_runs(tmp_path: Path, attnbench) -> None:
    link = tmp_path / "run.json"
    link.symlink_to("/dev/zero")
    code, _, err = attnbench.outcome("bench", "--only", "numpy_naive", *FAST, "--out", str(link), timeout=120,
                                     preexec_fn=_bounded_memory)
    assert code == 2, err
    _one_line(err, str(link))


# 2. the lock sidecar


@pytest.mark.parametrize("command", ["verify", "bench"])
def test_a_planted_lock_link_is_never_written_through(tmp_path: Path, command: str, attnbench) -> None:
    res = tmp_path / "res"
    res.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (res / ".v.json.lock").symlink_to("../victim")
    args = (["verify", "--only", "numpy_naive", "--suite", "small", "--trials", "1", "--json", str(res / "v.json")]
            if command == "verify" else ["bench", "--only", "numpy_naive", *FAST, "--out", str(res / "v.json")])
    code, _, err = attnbench.outcome(*args, timeout=BOUND_S)
    assert code == 2, err
    _one_line(err, str(res / ".v.json.lock"), "link")
    assert victim.read_text() == "precious\n"


# 3. outputs: whole or not at all, never through a link, a clear line when they cannot be written


@pytest.mark.parametrize("history", [True, False])
def test_report_out_that_is_a_file_or_unwritable_is_one_line(tmp_path: Path, files: dict[str, Path], history: bool,
                                                              attnbench) -> None:
    flag = ["--history", str(files["c1"]), str(files["c2"])] if history else [str(files["base"])]
    taken = tmp_path / "taken"
    taken.write_text("mine\n")
    for out in (taken, Path("/proc/attnbench-cannot-be-here")):
        code, _, err = attnbench.outcome("report", *flag, "--out", str(out), timeout=120)
        assert code == 2, err
        _one_line(err, str(out))
    assert taken.read_text() == "mine\n"


def test_history_never_writes_through_a_planted_link(tmp_path: Path, files: dict[str, Path], attnbench) -> None:
    out = tmp_path / "hist"
    out.mkdir()
    victim = tmp_path / "victim.html"
    victim.write_text("precious\n")
    (out / "history.html").symlink_to(victim)
    code, _, err = attnbench.outcome("report", "--history", str(files["c1"]), str(files["c2"]), "--out", str(out))
    assert code == 2, err
    _one_line(err, str(out / "history.html"), "link")
    assert victim.read_text() == "precious\n"


def test_history_on_a_full_disk_names_the_file_and_leaves_no_empty_page(tmp_path: Path, files: dict[str, Path],
                                                                         attnbench) -> None:
    out = tmp_path / "hist"
    code, _, err = attnbench.outcome("report", "--history", str(files["c1"]), str(files["c2"]), "--out", str(out),
                                     preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (2000, 2000)))
    assert code == 2, err
    line = _one_line(err, str(out))
    assert "history" in line, line
    assert not [p for p in out.rglob("*") if p.is_file() and p.stat().st_size == 0], list(out.rglob("*"))


def test_report_never_writes_plots_through_a_linked_directory(tmp_path: Path, files: dict[str, Path],
                                                               attnbench) -> None:
    out, elsewhere = tmp_path / "rep", tmp_path / "elsewhere"
    out.mkdir()
    elsewhere.mkdir()
    (out / "plots").symlink_to(elsewhere)
    code, _, err = attnbench.outcome("report", str(files["base"]), "--out", str(out), timeout=120)
    assert code == 2, err
    _one_line(err, str(out / "plots"), "link")
    assert list(elsewhere.iterdir()) == []


def test_report_out_that_is_a_link_is_refused(tmp_path: Path, files: dict[str, Path], attnbench) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "rep").symlink_to(elsewhere)
    code, _, err = attnbench.outcome("report", str(files["base"]), "--out", str(tmp_path / "rep"), timeout=120)
    assert code == 2, err
    _one_line(err, str(tmp_path / "rep"), "link")
    assert list(elsewhere.iterdir()) == []


# 4. output flags never replace an input, nor a file of another kind


def test_compare_markdown_never_replaces_an_input_or_a_users_file(tmp_path: Path, files: dict[str, Path],
                                                                   attnbench) -> None:
    before = files["base"].read_bytes()
    code, _, err = attnbench.outcome("compare", str(files["base"]), str(files["head"]), "--markdown", str(files["base"]))
    assert code == 2, err
    _one_line(err, str(files["base"]), "input")
    assert files["base"].read_bytes() == before
    notes = tmp_path / "notes.md"
    notes.write_text("my notes\n")
    code, _, err = attnbench.outcome("compare", str(files["base"]), str(files["head"]), "--markdown", str(notes))
    assert code == 2, err
    _one_line(err, str(notes), "refusing")
    assert notes.read_text() == "my notes\n"
    summary = tmp_path / "summary.md"
    summary.write_text("")  # as $GITHUB_STEP_SUMMARY is before a step writes it
    assert attnbench.outcome("compare", str(files["base"]), str(files["head"]), "--markdown", str(summary))[0] == 1
    assert summary.read_text().startswith("# attnbench compare")
    assert attnbench.outcome("compare", str(files["base"]), str(files["head"]), "--markdown", str(summary))[0] == 1


PLUGIN = '''
import pathlib, torch
from harness import register


@register("marked", backend="torch")
def marked(q, k, v, *, causal=False, mask=None, scale=None):
    pathlib.Path({marker!r}).write_text("timed")
    gate_if_asked()
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)


def gate_if_asked():
    if pathlib.Path({gated!r}).exists():
        gate("kernel")
'''


@pytest.fixture
def sides(tmp_path: Path) -> dict[str, Path]:
    """One plugin in two checkouts (``base/`` and ``head/``); its kernel leaves ``timed`` when it is called."""
    out = {"marker": tmp_path / "timed", "gated": tmp_path / "gated"}
    for side in ("base", "head"):
        (tmp_path / side).mkdir()
        out[side] = plugin_file(tmp_path / side, PLUGIN.format(marker=str(out["marker"]), gated=str(out["gated"])),
                                "kernels.py")
    return out


def _ab(sides: dict[str, Path], *args: str, attnbench) -> tuple[int, str, str]:  # type: ignore[no-untyped-def]
    return attnbench.outcome("ab", str(sides["base"]), str(sides["head"]), *AB_FAST, *args, timeout=BOUND_S)


def test_ab_outputs_never_replace_a_users_file_and_are_checked_first(tmp_path: Path, sides: dict[str, Path],
                                                                      attnbench) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    occupied = tmp_path / "occupied"
    occupied.mkdir()
    (occupied / "base.json").write_text("not a result\n")
    (tmp_path / "afile").write_text("x")
    for args, named in ((["--json", str(notes)], notes), (["--markdown", str(notes)], notes),
                        (["--out", str(occupied)], occupied / "base.json"),
                        (["--json", str(tmp_path / "afile" / "v.json")], tmp_path / "afile"),
                        (["--only", ""], "--only")):
        code, _, err = _ab(sides, *args, attnbench=attnbench)
        assert code == 2, (args, err)
        _one_line(err, str(named))
        assert not sides["marker"].exists(), f"{args}: timed before the flags were checked"
    assert notes.read_text() == "my notes\n" and (occupied / "base.json").read_text() == "not a result\n"


def test_ab_interrupted_says_what_was_kept(tmp_path: Path, sides: dict[str, Path], attnbench) -> None:
    sides["gated"].write_text("yes")
    proc = attnbench.start("ab", str(sides["base"]), str(sides["head"]), *AB_FAST, "--out", str(tmp_path / "ab"))
    try:
        deadline = time.monotonic() + BOUND_S
        while not any((tmp_path / side / "kernel.started").exists() for side in ("base", "head")):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=BOUND_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    line = _one_line(err, "interrupted")
    assert "kept" in line or "nothing" in line, line
    assert not (tmp_path / "ab" / "base.json").exists()


def test_outputs_keep_no_debris_and_are_regular_files(tmp_path: Path, files: dict[str, Path], attnbench) -> None:
    out = tmp_path / "hist"
    code, _, err = attnbench.outcome("report", "--history", str(files["c1"]), str(files["c2"]), "--out", str(out))
    assert code == 0, err
    code, _, err = attnbench.outcome("report", "--history", str(files["c1"]), str(files["c2"]), "--out", str(out))
    assert code == 0, err  # a re-run replaces its own files
    names = sorted(p.name for p in out.rglob("*"))
    assert not [n for n in names if n.startswith(".")], names
    assert all(stat.S_ISREG(p.lstat().st_mode) for p in out.rglob("*") if not p.is_dir())
    shutil.rmtree(out)
    assert json.loads(files["c1"].read_text())["environment"]["git_commit"] == "aaa"
