"""`attnbench compare` on hand-built runs: noise is not a regression, a 1.6x slow-down is, exit codes; where the
runs' own noise or load cannot decide, the cell is "not comparable", never a regression."""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from pathlib import Path

import pytest
from test_report_data import bench_cases, write_bench_run, write_verify_run

from harness.analysis.paired import RunNoise, decide_runs, noise_allowance
from harness.analysis.stats import summarize
from harness.cli import main
from harness.errors import UsageError
from harness.report.compare import (
    REGRESSION,
    UNCHANGED,
    UNDECIDED,
    compare_cell,
    compare_files,
    min_p_value,
    parse_threshold,
)
from harness.results import BenchCell

CELLS = len(bench_cases())  # bench cells per implementation

KEY = ("impl", "B1-H1-T16-d16-float32", "fwd")


def cell(samples: Sequence[float], status: str = "ok", load: float | None = None, unit: str | None = None) -> BenchCell:
    """A cell as every writer (bench, ab) and reader (pytest-benchmark) gives it: with the stats of its samples."""
    return BenchCell(implementation=KEY[0], case={}, case_id=KEY[1], mode=KEY[2], status=status,
                     samples_s=tuple(samples), stats=summarize(samples) if samples else None, load_average=load,
                     sample_unit=unit)


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
    assert all(1.5 < r < 1.7 for r in ratios)
    # two separate runs: no test on their raw samples (they share each run's load), the noise allowance instead
    assert all(c["p_value"] is None and 1.0 < c["allowance"] < 1.15 for c in result["cells"] if c["verdict"] == REGRESSION)
    markdown = (tmp_path / "c.md").read_text()
    assert f"**{CELLS} regression(s) beyond 25%.**" in markdown and "| tiled |" in markdown
    # the same slow-down under a looser threshold is not a regression
    assert main(["compare", str(runs["base"]), str(runs["slow"]), "--threshold", "70%"]) == 0


def test_improvements_are_listed_and_do_not_fail(runs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", str(runs["base"]), str(runs["fast"])]) == 0
    out = capsys.readouterr().out
    assert "Improvements" in out and "numpy_naive" in out and f"0 regression(s), {CELLS} improvement(s)" in out


def test_a_ratio_the_runs_noise_can_explain_is_not_comparable_never_a_regression() -> None:
    rng = random.Random(0)
    base = [1.0 + rng.uniform(-0.05, 0.05) for _ in range(10)]
    # a 30% slower median, but samples so spread out (IQR ~ 70% of the median) that one run's noise explains it
    spread = [0.5, 0.6, 0.7, 1.2, 1.3, 1.31, 1.32, 2.0, 2.2, 2.4]
    noisy = compare_cell(KEY, cell(base), cell(spread), 0.25, 0.05)
    assert noisy.ratio > 1.25 and noisy.verdict == UNDECIDED and noisy.p_value is None
    assert noisy.note.startswith("not comparable: base IQR") and "new IQR 77%" in noisy.note and "attnbench ab" in noisy.note
    # three quiet samples a side are enough when the ratio (2x) is far beyond the noise: the run is the unit
    few = compare_cell(KEY, cell([1.0, 1.01, 0.99]), cell([2.0, 2.02, 1.98]), 0.25, 0.05)
    assert few.verdict == REGRESSION and few.allowance is not None and few.allowance < 1.05
    same = compare_cell(KEY, cell(base), cell([x * 1.01 for x in base]), 0.25, 0.05)
    assert same.verdict == UNCHANGED
    skipped = compare_cell(KEY, cell(base), cell([], status="skipped"), 0.25, 0.05)
    assert skipped.verdict == "not comparable" and "new skipped" in skipped.note


def test_a_loaded_run_makes_the_threshold_undecidable() -> None:
    """The issue's A/A case: identical code, 1.44x apart, bench's IQR 45% and load 6.2 on 2 cores."""
    base = cell([0.8, 0.9, 1.0, 1.1, 1.35], load=6.2)
    new = cell([1.2, 1.3, 1.44, 1.6, 1.9], load=6.2)
    out = compare_cell(KEY, base, new, 0.25, 0.05, base_cores=2, new_cores=2)
    assert out.verdict == UNDECIDED and "base IQR 20%, load 6.2 on 2 cores" in out.note, out.note
    # the same samples on an idle machine (load 0.3): 1.44x is beyond what 20% + 20% IQR explains
    idle = compare_cell(KEY, cell(base.samples_s, load=0.3), cell(new.samples_s, load=0.3), 0.25, 0.05, 2, 2)
    assert idle.verdict == UNDECIDED  # 1.44 / 1.4 = 1.03: still within the noise
    quiet = compare_cell(KEY, cell([1.0, 1.01, 1.02, 0.99, 1.0], load=0.3), cell([1.44, 1.45, 1.43, 1.46, 1.44], load=0.3),
                         0.25, 0.05, 2, 2)
    assert quiet.verdict == REGRESSION
    # a 4x slow-down is beyond even load 6.2's stretch (3.1x) with quiet samples: decided
    far = compare_cell(KEY, cell([1.0, 1.01, 0.99], load=6.2), cell([4.5, 4.6, 4.4], load=6.2), 0.25, 0.05, 2, 2)
    assert far.verdict == REGRESSION


def test_the_decision_rules_on_synthetic_numbers() -> None:
    quiet, loaded = RunNoise(0.02, 0.5, 2), RunNoise(0.45, 6.2, 2)
    assert quiet.stretch == 1.0 and loaded.stretch == pytest.approx(3.1)
    assert noise_allowance(quiet, quiet) == pytest.approx(1.04)
    assert noise_allowance(quiet, RunNoise(None)) == float("inf")  # unknown noise decides nothing beyond the band
    allowance = noise_allowance(quiet, quiet)
    assert decide_runs(1.6, allowance, 0.25) == REGRESSION
    assert decide_runs(1.0, allowance, 0.25) == UNCHANGED
    assert decide_runs(0.5, allowance, 0.25) == "improvement"
    assert decide_runs(1.25, allowance, 0.25) == UNDECIDED
    assert decide_runs(1.44, noise_allowance(loaded, loaded), 0.25) == UNDECIDED


def test_rounds_are_replications_and_are_tested() -> None:
    """Cells whose samples are rounds (`attnbench ab`'s side files): Mann-Whitney U over the rounds."""
    rng = random.Random(3)
    base = [1.0 * rng.uniform(0.6, 1.6) for _ in range(12)]  # load moves every round
    slower = [x * 1.5 * rng.uniform(0.97, 1.03) for x in base]
    out = compare_cell(KEY, cell(base, unit="round"), cell(slower, unit="round"), 0.25, 0.05)
    assert out.p_value is not None and out.allowance is None
    assert out.verdict == (REGRESSION if out.p_value < 0.05 else UNCHANGED)
    tight = [1.0 + 0.01 * i for i in range(10)]
    clear = compare_cell(KEY, cell(tight, unit="round"), cell([2 * x for x in tight], unit="round"), 0.25, 0.05)
    assert clear.verdict == REGRESSION and clear.p_value < 1e-3
    few = compare_cell(KEY, cell([1.0, 1.1], unit="round"), cell([2.0, 2.1], unit="round"), 0.25, 0.05)
    assert few.verdict == UNDECIDED and "too few rounds" in few.note


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
