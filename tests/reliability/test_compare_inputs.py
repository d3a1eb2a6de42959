"""`compare` judges two whole runs: an incomplete run or a NEW run missing BASE's cells fails the gate (exit 2,
naming the file and the flag that allows it); non-finite or non-positive times are refused, never "unchanged"
or an "improvement"."""

from __future__ import annotations

from pathlib import Path

import pytest
from result_documents import bench_document, damaged, write

from harness.cli import main


def _one_line_error(err: str, *names: str) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert all(name in lines[0] for name in names), err


def test_a_run_killed_halfway_fails_the_gate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = write(tmp_path / "base.json", bench_document())
    half = bench_document()
    half["complete"] = False
    half["cells"] = half["cells"][: len(half["cells"]) // 2]
    new = write(tmp_path / "new.json", half)
    assert main(["compare", str(base), str(new)]) == 2
    _one_line_error(capsys.readouterr().err, str(new), "incomplete", "--resume", "--allow-incomplete")
    assert main(["compare", str(new), str(base)]) == 2  # an incomplete BASE is no reference either
    _one_line_error(capsys.readouterr().err, str(new), "incomplete")
    assert main(["compare", str(base), str(new), "--allow-incomplete"]) == 2  # and it still lacks cells
    _one_line_error(capsys.readouterr().err, str(new), "3 cell(s)", "missing", "--allow-missing")
    assert main(["compare", str(base), str(new), "--allow-incomplete", "--allow-missing"]) == 0


def test_a_new_run_of_fewer_cells_fails_the_gate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = write(tmp_path / "base.json", bench_document())
    fewer = bench_document()
    fewer["cells"] = fewer["cells"][1:]
    new = write(tmp_path / "new.json", fewer)
    assert main(["compare", str(base), str(new)]) == 2
    _one_line_error(capsys.readouterr().err, "1 cell(s)", "missing", "torch_sdpa")
    assert main(["compare", str(base), str(new), "--allow-missing"]) == 0
    # more cells in NEW (a new implementation) is fine
    assert main(["compare", str(new), str(base)]) == 0


@pytest.mark.parametrize("median", [float("nan"), float("inf"), -1e-3, 0.0])
def test_nonsense_times_are_refused(median: float, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = write(tmp_path / "base.json", bench_document())
    new = damaged(bench_document(), "cells", 0, "stats", "median", value=median)
    new["cells"][0]["samples_s"] = [median] * 7
    path = write(tmp_path / "new.json", new)
    assert main(["compare", str(base), str(path)]) == 2
    _one_line_error(capsys.readouterr().err, str(path), "damaged", "cells[0].samples_s[0]", "not a time")


def test_in_a_real_process(tmp_path: Path, attnbench) -> None:
    base = write(tmp_path / "base.json", bench_document())
    half = bench_document()
    half["complete"] = False
    new = write(tmp_path / "new.json", half)
    done = attnbench("compare", str(base), str(new), timeout=300)
    assert done.returncode == 2 and "incomplete" in done.stderr, done.stderr
