"""Damaged result files: `report` and `compare` say "FILE: a damaged result file: WHERE: WHAT" and exit 2,
never a traceback and exit 3 (docs/results.md, "Untrusted result files")."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from result_documents import bench_document, damaged, pytest_benchmark_document, verify_document, write

from harness.cli import main

B, V = bench_document(), verify_document()
DEEP: Any = 1
for _ in range(40):  # past the 32 levels a free-form value may nest
    DEEP = [DEEP]

DAMAGES: dict[str, tuple[Any, str]] = {  # name: (the damaged document, what the message names)
    "cells a string": (damaged(B, "cells", value="abc"), "cells"),
    "coverage a string": (damaged(V, "coverage", value="abc"), "coverage"),
    "coverage.covered a string": (damaged(V, "coverage", "tiled", "covered", value="<script>alert(1)</script>"),
                                  "coverage.tiled.covered"),
    "peaks a string": (damaged(B, "peaks", value="fast"), "peaks"),
    "a peak a list": (damaged(B, "peaks", "float32/cpu", value=[1, 2]), "peaks['float32/cpu']"),
    "peak gflops a string": (damaged(B, "peaks", "float32/cpu", "gflops", value="many"), "gflops"),
    "bandwidth a number": (damaged(B, "bandwidth", value=3), "bandwidth"),
    "a case a list": (damaged(B, "cells", 0, "case", value=[1, 2]), "cells[0].case"),
    "a case size a string": (damaged(B, "cells", 1, "case", "tq", value="abc"), "cells[1].case.tq"),
    "a window of three": (damaged(B, "cells", 1, "case", "window", value=[1, 2, 3]), "cells[1].case.window"),
    "samples_s strings": (damaged(B, "cells", 2, "samples_s", value=["a"]), "cells[2].samples_s[0]"),
    "samples_s a number": (damaged(B, "cells", 2, "samples_s", value=5), "cells[2].samples_s"),
    "median a word": (damaged(B, "cells", 0, "stats", "median", value="fast"), "cells[0].stats.median"),
    "median Infinity": (damaged(B, "cells", 0, "stats", "median", value=float("inf")), "cells[0].stats.median"),
    "median NaN": (damaged(B, "cells", 0, "stats", "median", value=float("nan")), "cells[0].stats.median"),
    "median negative": (damaged(B, "cells", 0, "stats", "median", value=-0.5), "cells[0].stats.median"),
    "a sample zero": (damaged(B, "cells", 3, "samples_s", 0, value=0), "cells[3].samples_s[0]"),
    "flops negative": (damaged(B, "cells", 0, "flops", value=-1.0), "cells[0].flops"),
    "bytes Infinity": (damaged(B, "cells", 1, "bytes", value=float("inf")), "cells[1].bytes"),
    "stats a string": (damaged(B, "cells", 0, "stats", value="x"), "cells[0].stats"),
    "memory a list": (damaged(B, "cells", 0, "memory", value=[]), "cells[0].memory"),
    "integrity checked strings": (damaged(B, "cells", 0, "integrity", "checked", value=["x"]), "checked[0]"),
    "profile pairs of strings": (damaged(B, "cells", 0, "profile", value=[["a", "b"]]), "cells[0].profile[0][1]"),
    "status unknown": (damaged(B, "cells", 0, "status", value="fine"), "cells[0].status"),
    "status a number": (damaged(B, "cells", 0, "status", value=1), "cells[0].status"),
    "no status": (damaged(B, "cells", 0, value={"type": "bench", "implementation": "x", "case_id": "c"}), "status"),
    "a cell a number": (damaged(B, "cells", 0, value=7), "cells[0]"),
    "implementation a list": (damaged(B, "cells", 0, "implementation", value=["a"]), "cells[0].implementation"),
    "a huge integer": (damaged(B, "cells", 0, "threads", value=10**4000), "cells[0].threads"),
    "a 5000-digit integer": ('{"schema": "attnbench.results", "schema_version": 3, "cells": [], "x": '
                             + "9" * 5000 + "}", "digits"),
    "a huge size": (damaged(B, "cells", 0, "case", "tq", value=10**30), "cells[0].case.tq"),
    "deep nesting": ('{"schema": "attnbench.results", "schema_version": 3, "x": ' + "[" * 100_000
                     + "]" * 100_000 + "}", "nested"),
    "deep nesting in a case": (damaged(B, "cells", 0, "case", "extra", value=DEEP), "nested"),
    "metrics a list": (damaged(V, "cells", 0, "metrics", value=[1]), "cells[0].metrics"),
    "a metric a word": (damaged(V, "cells", 0, "metrics", "max_abs_err", value="tiny"), "max_abs_err"),
    "complete a string": (damaged(B, "complete", value="yes"), "complete"),
    "environment a list": (damaged(B, "environment", value=[]), "environment"),
    "config threads a string": (damaged(B, "config", "threads", value="2"), "config.threads"),
    "implementations a string": (damaged(B, "implementations", value="abc"), "implementations"),
    "a memory exponent NaN": (damaged(B, "implementations", "tiled", "memory_exponent", value=float("nan")),
                              "memory_exponent"),
    "schema_version a string": (damaged(B, "schema_version", value="3"), "schema_version \"3\" is not a number"),
    "schema_version true": (damaged(B, "schema_version", value=True), "schema_version true is not a number"),
    "pytest-benchmark [1]": ({"benchmarks": [1]}, "benchmarks[0]"),
    "pytest-benchmark stats a list": (damaged(pytest_benchmark_document(), "benchmarks", 0, "stats", value=[]),
                                      "benchmarks[0].stats"),
    "pytest-benchmark data strings": (damaged(pytest_benchmark_document(), "benchmarks", 0, "stats", "data",
                                              value=["x"]), "benchmarks[0].samples_s[0]"),
    "pytest-benchmark median a word": (damaged(pytest_benchmark_document(), "benchmarks", 0, "stats", "median",
                                               value="x"), "benchmarks[0].stats.median"),
    "pytest-benchmark T a word": (damaged(pytest_benchmark_document(), "benchmarks", 0, "extra_info", "T",
                                          value="x"), "benchmarks[0].case.tq"),
    "pytest-benchmark machine_info a list": (damaged(pytest_benchmark_document(), "machine_info", value=[1]),
                                             "machine_info"),
}


def _expect_damaged(code: int, err: str, path: Path, names: str) -> None:
    assert code == 2, err
    assert "Traceback" not in err and "internal error" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and f"{path}: " in lines[0], err
    assert "damaged result file" in lines[0] or "not valid JSON" in lines[0], err
    assert names in lines[0], err


@pytest.mark.parametrize("name", DAMAGES)
def test_report_says_where_a_file_is_damaged(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    document, names = DAMAGES[name]
    path = write(tmp_path / "damaged.json", document)
    code = main(["report", str(path), "--out", str(tmp_path / "report")])
    _expect_damaged(code, capsys.readouterr().err, path, names)
    assert not (tmp_path / "report" / "index.html").exists()


@pytest.mark.parametrize("name", DAMAGES)
def test_compare_says_where_a_file_is_damaged(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    document, names = DAMAGES[name]
    path = write(tmp_path / "damaged.json", document)
    good = write(tmp_path / "good.json", bench_document())
    for argv in ([str(good), str(path)], [str(path), str(good)]):
        code = main(["compare", *argv])
        _expect_damaged(code, capsys.readouterr().err, path, names)


def test_the_undamaged_documents_report_and_compare(tmp_path: Path) -> None:
    bench, verify = write(tmp_path / "b.json", B), write(tmp_path / "v.json", V)
    pytest_json = write(tmp_path / "p.json", pytest_benchmark_document())
    assert main(["report", str(bench), str(verify), str(pytest_json), "--out", str(tmp_path / "r")]) in (0, 1)
    assert (tmp_path / "r" / "index.html").exists()
    assert main(["compare", str(bench), str(bench)]) == 0


def test_old_files_with_nan_errors_still_read(tmp_path: Path) -> None:
    """A NaN where attnbench once wrote one (the error of a NaN output) is a value, not damage."""
    document = damaged(V, "cells", 0, "metrics", "max_abs_err", value=float("nan"))
    document = damaged(document, "cells", 1, "metrics", "ratio", value=float("inf"))
    path = tmp_path / "v.json"
    path.write_text(json.dumps(document))
    assert "NaN" in path.read_text()
    assert main(["report", str(path), "--out", str(tmp_path / "r")]) in (0, 1)


@pytest.mark.parametrize("name", ["coverage.covered a string", "deep nesting", "pytest-benchmark [1]"])
def test_a_damaged_file_in_a_real_process_is_exit_2(name: str, tmp_path: Path, attnbench) -> None:
    document, names = DAMAGES[name]
    path = write(tmp_path / "damaged.json", document)
    done = attnbench("report", str(path), "--out", str(tmp_path / "r"), timeout=300)
    _expect_damaged(done.returncode, done.stderr, path, names)


def test_a_size_of_zero_is_left_out_of_the_fits(tmp_path: Path) -> None:
    """Found by the fuzzer: a pytest-benchmark size T = 0 reached the cost model (log scale) as exit 3."""
    document = damaged(pytest_benchmark_document(), "benchmarks", 2, "extra_info", "T", value=0)
    path = write(tmp_path / "zero.json", document)
    assert main(["report", str(path), "--out", str(tmp_path / "r")]) in (0, 1)
    assert (tmp_path / "r" / "index.html").exists()


def test_a_cell_of_no_flops_is_left_off_the_roofline(tmp_path: Path) -> None:
    """Found by the fuzzer: FLOPs of 0 put the roofline's log axis at 0 (a division by zero, exit 3)."""
    path = write(tmp_path / "zero.json", damaged(B, "cells", 2, "flops", value=0.0))
    assert main(["report", str(path), "--out", str(tmp_path / "r")]) in (0, 1)
    assert (tmp_path / "r" / "index.html").exists()
