"""Unwritable or wrong-kind paths, wherever a command reads or writes: exit 2 and one line naming the path."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.cli import main

BENCH_FILE = str(Path(__file__).parents[1] / "data" / "schema_v1" / "main-job-bench.json")

CASES = {
    "compare --markdown unwritable": (["compare", BENCH_FILE, BENCH_FILE, "--markdown", "/proc/x.md"], "/proc/x.md"),
    "compare --markdown a directory": (["compare", BENCH_FILE, BENCH_FILE, "--markdown", "{dir}"], "{dir}"),
    "report --out unwritable": (["report", BENCH_FILE, "--out", "/proc/rep"], "/proc/rep"),
    "report --out a file": (["report", BENCH_FILE, "--out", "{file}"], "{file}"),
    "report of a directory": (["report", "{dir}"], "{dir}"),
    "compare of a directory": (["compare", "{dir}", BENCH_FILE], "{dir}"),
    "compare with a directory": (["compare", BENCH_FILE, "{dir}"], "{dir}"),
    "bench --resume a directory": (["bench", "--resume", "{dir}"], "{dir}"),
    "bench --resume unreadable": (["bench", "--resume", "/proc/self/mem"], "/proc/self/mem"),
}


@pytest.mark.parametrize("name", CASES)
def test_a_bad_path_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str) -> None:
    argv, named = CASES[name]
    afile, adir = tmp_path / "afile", tmp_path / "adir"
    afile.write_text("not a directory")
    adir.mkdir()
    fill = {"{file}": str(afile), "{dir}": str(adir)}
    code = main([fill.get(a, a) for a in argv])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "error:" in lines[0] and fill.get(named, named) in lines[0], err
    assert afile.read_text() == "not a directory" and not list(adir.iterdir())  # nothing was written in either
