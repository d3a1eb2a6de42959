"""`attnbench compare` on hand-built runs: noise is not a regression, a 1.6x slow-down is, exit codes."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from test_report_data import bench_cases, write_bench_run, write_verify_run

from harness.cli import main
from harness.errors import UsageError
from harness.report.compare import (
    REGRESSION,
    UNCHANGED,
    compare_cell,
    compare_files,
    min_p_value,
    parse_threshold,
)
from harness.results import BenchCell

CELLS = len(bench_cases())  # bench cells per implementation

KEY = ("impl", "B1-H1-T16-d16-float32", "fwd")


def cell(samples: list[float], status: str = "ok") -> BenchCell:
    return BenchCell(implementation=KEY[0], case={}, case_id=KEY[1], mode=KEY[2], status=status,
                     samples_s=tuple(samples))


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("runs")
    return {"base": write_bench_run(d / "base.json", seed=1), "again": write_bench_run(d / "again.json", seed=2),
            "slow": write_bench_run(d / "slow.json", seed=3, slow={"tiled": 1.6}),
            "fast": write_bench_run(d / "fast.json", seed=4, slow={"numpy_naive": 0.5})}


def test_two_runs_of_the_same_code_report_no_regression(runs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", str(runs["base"]), str(runs["again"])]) == 0
    assert "0 regression(s), 0 improvement(s) beyond 25%" in capsys.readouterr().out


def test_a_slowed_implementation_is_a_regression_and_exits_1(runs: dict[str, Path], tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", str(runs["base"]), str(runs["slow"]), "--json", "--markdown", str(tmp_path / "c.md")]) == 1
    result = json.loads(capsys.readouterr().out)
    regressed = {c["implementation"] for c in result["cells"] if c["verdict"] == REGRESSION}
    assert regressed == {"tiled"} and result["regressions"] == CELLS and result["improvements"] == 0
    ratios = [c["ratio"] for c in result["cells"] if c["verdict"] == REGRESSION]
    assert all(1.5 < r < 1.7 for r in ratios) and all(c["p_value"] < 1e-4 for c in result["cells"]
                                                      if c["verdict"] == REGRESSION)
    markdown = (tmp_path / "c.md").read_text()
    assert f"**{CELLS} significant regression(s) beyond 25%.**" in markdown and "| tiled |" in markdown
    # the same slow-down under a looser threshold is not a regression
    assert main(["compare", str(runs["base"]), str(runs["slow"]), "--threshold", "70%"]) == 0


def test_improvements_are_listed_and_do_not_fail(runs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", str(runs["base"]), str(runs["fast"])]) == 0
    out = capsys.readouterr().out
    assert "Improvements" in out and "numpy_naive" in out and f"0 regression(s), {CELLS} improvement(s)" in out


def test_the_ratio_needs_significance_and_tiny_samples_fall_back_to_the_ratio() -> None:
    rng = random.Random(0)
    base = [1.0 + rng.uniform(-0.05, 0.05) for _ in range(10)]
    # a 30% slower median, but samples so spread out that the test cannot tell the runs apart
    spread = [0.5, 0.6, 0.7, 1.2, 1.3, 1.31, 1.32, 2.0, 2.2, 2.4]
    noisy = compare_cell(KEY, cell(base), cell(spread), 0.25, 0.05)
    assert noisy.ratio > 1.25 and noisy.p_value > 0.05 and noisy.verdict == UNCHANGED and "not significant" in noisy.note
    few = compare_cell(KEY, cell([1.0, 1.01, 0.99]), cell([2.0, 2.02, 1.98]), 0.25, 0.05)
    assert min_p_value(3, 3) == pytest.approx(0.1)
    assert few.verdict == REGRESSION and few.p_value is None and "ratio only" in few.note
    skipped = compare_cell(KEY, cell(base), cell([], status="skipped"), 0.25, 0.05)
    assert skipped.verdict == "not comparable" and "new skipped" in skipped.note


def test_threshold_parsing() -> None:
    assert parse_threshold("25%") == pytest.approx(0.25) and parse_threshold("0.1") == pytest.approx(0.1)
    for bad in ("25", "abc", "0%", "-5%"):
        with pytest.raises(UsageError):
            parse_threshold(bad)


def test_bad_inputs_are_usage_errors(runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    verify = write_verify_run(tmp_path / "verify.json")
    assert main(["compare", str(runs["base"]), str(verify)]) == 2
    assert "no bench cells" in capsys.readouterr().err
    assert main(["compare", str(runs["base"]), str(tmp_path / "nope.json")]) == 2
    assert main(["compare", str(runs["base"]), str(runs["again"]), "--threshold", "25"]) == 2
    assert "ambiguous" in capsys.readouterr().err


def pytest_benchmark_file(path: Path, scale: float, seed: int) -> Path:
    rng = random.Random(seed)
    benchmarks = []
    for name in ("torch_sdpa", "tiled"):
        data = [scale * (1e-3 if name == "tiled" else 2e-4) * (1 + rng.gauss(0, 0.02)) for _ in range(12)]
        data.sort()
        benchmarks.append({"group": "T256", "name": f"test_fwd[{name}-T256]", "fullname": f"x.py::test_fwd[{name}-T256]",
                           "params": {"name": name}, "param": f"{name}-T256",
                           "extra_info": {"implementation": name, "case_id": "B1-H8-T256-d64-float32"},
                           "stats": {"median": data[6], "iqr": data[9] - data[3], "min": data[0], "mean": sum(data) / 12,
                                     "stddev": 0.0, "rounds": 12, "data": data}})
    path.write_text(json.dumps({"machine_info": {}, "commit_info": {}, "benchmarks": benchmarks}))
    return path


def test_pytest_benchmark_json_is_compared_too(tmp_path: Path) -> None:
    base = pytest_benchmark_file(tmp_path / "a.json", 1.0, 0)
    assert compare_files(base, pytest_benchmark_file(tmp_path / "b.json", 1.0, 1)).regressions == []
    slow = compare_files(base, pytest_benchmark_file(tmp_path / "c.json", 2.0, 2))
    assert sorted(c.implementation for c in slow.regressions) == ["tiled", "torch_sdpa"]


def test_a_cell_that_now_crashes_fails_the_comparison(runs: dict[str, Path], tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    from harness.results import load_results, write_json_atomic

    data = load_results(runs["again"])
    victim = next(c for c in data["cells"] if c["implementation"] == "tiled")
    victim.update(status="crash", reason="worker died: SIGSEGV", samples_s=[], stats=None)
    write_json_atomic(tmp_path / "crashed.json", data)
    assert main(["compare", str(runs["base"]), str(tmp_path / "crashed.json"), "--markdown", str(tmp_path / "c.md")]) == 1
    assert "1 newly failing" in capsys.readouterr().out
    markdown = (tmp_path / "c.md").read_text()
    assert "1 cell(s) measured in the base run now fail" in markdown and "SIGSEGV" in markdown
    assert "xformers_memeff" not in markdown  # skipped in both runs: not worth a line


def _many_samples_run(path: Path, seed: int, slow: float, n: int) -> Path:
    from test_report_data import bench_cell

    from harness.results import ResultWriter

    rng = random.Random(seed)
    writer = ResultWriter(path, "bench", {"suite": "synthetic"})
    for case in bench_cases()[:2]:
        writer.append(bench_cell("tiled", case, rng, slow, n=n))
    writer.finish()
    return path


def test_runs_with_thousands_of_samples_per_cell_compare(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """2 / C(n+m, n) overflowed a float past ~515 samples a side: compare crashed with exit 1, "regression"."""
    assert min_p_value(1200, 1200) == 0.0 and min_p_value(5, 5) == pytest.approx(2 / 252)
    base = _many_samples_run(tmp_path / "base.json", seed=1, slow=1.0, n=1200)
    again = _many_samples_run(tmp_path / "again.json", seed=2, slow=1.0, n=1200)
    slow = _many_samples_run(tmp_path / "slow.json", seed=3, slow=1.5, n=1200)
    assert main(["compare", str(base), str(again)]) == 0
    capsys.readouterr()
    assert main(["compare", str(base), str(slow), "--json"]) == 1
    result = json.loads(capsys.readouterr().out)
    assert result["regressions"] == 2 and all(c["n_base"] == 1200 for c in result["cells"])
