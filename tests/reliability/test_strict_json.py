"""Strict JSON (RFC 8259) everywhere attnbench writes it: result files and every ``--json`` output carry no
bare NaN or Infinity (a non-finite number is written as null), and files that hold them still read."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from result_documents import bench_document, damaged, verify_document, write

from harness.cli import main
from harness.results import ResultWriter, VerifyCell, read_run
from harness.results.files import dumps


def strict(text: str) -> Any:
    """Parse as a strict parser (Node's JSON.parse, jq) does: NaN, Infinity and -Infinity are errors."""
    def refuse(word: str) -> None:
        raise ValueError(f"not JSON: {word}")
    return json.loads(text, parse_constant=refuse)


def test_a_result_file_with_non_finite_numbers_is_strict_json(tmp_path: Path) -> None:
    writer = ResultWriter(tmp_path / "v.json", "verify", {"suite": "quick", "timeout_s": 300.0})
    writer.add(VerifyCell(implementation="nan_kernel", case={"tq": 16}, case_id="c", check="output", status="fail",
                          reason="the output holds NaN", metrics={"max_abs_err": math.nan, "ratio": math.inf,
                                                                 "worst": [-math.inf, 1.0]}))
    writer.set("implementations", {"nan_kernel": {"slope": math.nan}})
    writer.finish()
    stored = strict((tmp_path / "v.json").read_text())
    assert stored["cells"][0]["metrics"] == {"max_abs_err": None, "ratio": None, "worst": [None, 1.0]}
    cell = read_run(tmp_path / "v.json").verify_cells()[0]
    assert cell.reason == "the output holds NaN" and cell.metrics["max_abs_err"] is None


def test_dumps_keeps_finite_values_and_writes_non_finite_as_null() -> None:
    data = {"a": 1.5, "b": [math.nan, {"c": -math.inf}], "d": "NaN", "e": (1, math.inf)}
    assert strict(dumps(data)) == {"a": 1.5, "b": [None, {"c": None}], "d": "NaN", "e": [1, None]}
    assert dumps({"a": 1.5}) == json.dumps({"a": 1.5})


def test_an_old_file_with_bare_nan_reads_and_compare_json_is_strict(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    old = damaged(bench_document(), "cells", 0, "gflops", value=math.nan)
    old = damaged(old, "cells", 1, "stats", "iqr_over_median", value=math.inf)
    path = write(tmp_path / "old.json", old)
    assert "NaN" in path.read_text() and "Infinity" in path.read_text()
    assert main(["compare", str(path), str(path), "--json"]) == 0
    out = strict(capsys.readouterr().out)
    assert out["slower"] == 0
    assert main(["report", str(path), str(write(tmp_path / "v.json", verify_document())),
                 "--out", str(tmp_path / "r")]) in (0, 1)
