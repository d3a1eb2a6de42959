"""`attnbench compare` on hand-built runs: noise is not a slow-down, a 1.6x slow-down is, exit codes; where the
runs' own noise or load cannot decide, the cell is "undecided", never slower."""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from pathlib import Path

import pytest
from test_report_data import bench_cases, write_bench_run, write_verify_run

from harness.analysis.comparison import Side, allowance, decide, judge_separate
from harness.analysis.stats import summarize
from harness.cli import main
from harness.errors import UsageError
from harness.report.compare import (
    SLOWER,
    UNCHANGED,
    UNDECIDED,
    compare_cell,
    compare_files,
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


def test_two_runs_of_the_same_code_report_nothing_slower(runs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", str(runs["base"]), str(runs["again"])]) == 0
    out = capsys.readouterr().out
    assert "0 slower, 0 faster beyond 10%" in out and "95% interval" in out


def test_a_slowed_implementation_is_slower_and_exits_1(runs: dict[str, Path], tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", str(runs["base"]), str(runs["slow"]), "--json", "--markdown", str(tmp_path / "c.md")]) == 1
    result = json.loads(capsys.readouterr().out)
    regressed = {c["implementation"] for c in result["cells"] if c["verdict"] == SLOWER}
    assert regressed == {"tiled"} and result["slower"] == CELLS and result["faster"] == 0
    slower = [c for c in result["cells"] if c["verdict"] == SLOWER]
    assert all(1.5 < c["ratio"] < 1.7 and c["low"] > 1.0 and c["mde"] is not None for c in slower)
    # two separate runs: no test on their raw samples (they share each run's load), the noise allowance instead
    assert all(c["method"] == "separate runs" and 1.0 < c["allowance"] < 1.15 for c in slower)
    assert result["interval"] == "95% interval" and result["threshold"] == pytest.approx(0.10)
    markdown = (tmp_path / "c.md").read_text()
    assert f"**{CELLS * 4} cells compared: {CELLS} slower" in markdown and "| tiled |" in markdown
    assert "95% interval" in markdown and "MDE" in markdown
    # the same slow-down under a looser threshold is not slower beyond it
    assert main(["compare", str(runs["base"]), str(runs["slow"]), "--threshold", "70%"]) == 0


def test_faster_cells_are_listed_and_do_not_fail(runs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", str(runs["base"]), str(runs["fast"])]) == 0
    out = capsys.readouterr().out
    assert "Faster" in out and "numpy_naive" in out and f"0 slower, {CELLS} faster" in out


def test_a_ratio_the_runs_noise_can_explain_is_undecided_never_slower() -> None:
    rng = random.Random(0)
    base = [1.0 + rng.uniform(-0.05, 0.05) for _ in range(10)]
    # a 30% slower median, but samples so spread out (IQR ~ 70% of the median) that one run's noise explains it
    spread = [0.5, 0.6, 0.7, 1.2, 1.3, 1.31, 1.32, 2.0, 2.2, 2.4]
    noisy = compare_cell(KEY, cell(base), cell(spread), 0.10, 0.05)
    assert noisy.ratio > 1.25 and noisy.verdict == UNDECIDED and noisy.low < 1.0
    assert noisy.note.startswith("not comparable: base IQR") and "new IQR 77%" in noisy.note and "attnbench ab" in noisy.note
    # three quiet samples a side are enough when the ratio (2x) is far beyond the noise: the run is the unit
    few = compare_cell(KEY, cell([1.0, 1.01, 0.99]), cell([2.0, 2.02, 1.98]), 0.10, 0.05)
    assert few.verdict == SLOWER and few.allowance is not None and few.allowance < 1.05
    same = compare_cell(KEY, cell(base), cell([x * 1.01 for x in base]), 0.25, 0.05)
    assert same.verdict == UNCHANGED
    skipped = compare_cell(KEY, cell(base), cell([], status="skipped"), 0.10, 0.05)
    assert skipped.verdict == "not comparable" and "new skipped" in skipped.note


def test_a_loaded_wall_clock_run_widens_the_interval() -> None:
    """Identical code, 1.44x apart, IQR 20% and load 6.2 on 2 cores (wall clock): undecided."""
    base = Side(1.0, (0.8, 0.9, 1.0, 1.1, 1.35), 0.2, load=6.2, cores=2)
    new = Side(1.44, (1.2, 1.3, 1.44, 1.6, 1.9), 0.2, load=6.2, cores=2)
    out = judge_separate(base, new, 0.10, 0.05)
    assert out.verdict == UNDECIDED and "base IQR 20%, load 6.2 on 2 cores" in out.reason, out.reason
    assert out.allowance == pytest.approx(1.4 * 3.1)
    # a 4x slow-down is beyond even load 6.2's stretch (3.1x) with quiet samples: decided
    far = judge_separate(Side(1.0, (1.0, 1.01, 0.99), 0.01, 6.2, 2), Side(4.5, (4.5, 4.6, 4.4), 0.02, 6.2, 2), 0.10, 0.05)
    assert far.verdict == SLOWER


def test_cpu_clock_runs_get_no_load_stretch_and_a_difference_far_beyond_their_noise_is_decided() -> None:
    """Two CPU-clock runs of a kernel and one doing 30% more work: 1.28x with IQRs of 3-4% at load 0.5 (and at
    load 6 on 2 cores, which a CPU clock does not see) is slower, never "not comparable"."""
    rng = random.Random(8)
    base = sorted(1e-3 * (1 + rng.gauss(0, 0.022)) for _ in range(40))
    new = sorted(1.28e-3 * (1 + rng.gauss(0, 0.03)) for _ in range(40))
    for load in (0.5, 6.0):
        a, b = cell(base, load=load), cell(new, load=load)
        assert 0.02 < a.stats.iqr_over_median < 0.045 and 0.02 < b.stats.iqr_over_median < 0.05
        sides = (Side(a.stats.median, a.samples_s, a.stats.iqr_over_median, load, 2, "cpu"),
                 Side(b.stats.median, b.samples_s, b.stats.iqr_over_median, load, 2, "cpu"))
        out = judge_separate(*sides, 0.10, 0.05)
        assert out.verdict == SLOWER and out.low > 1.1 and out.allowance < 1.1, out
        assert allowance(*sides) == pytest.approx(1 + a.stats.iqr_over_median + b.stats.iqr_over_median)
    # the same samples on the wall clock at load 6 on 2 cores: stretched 3x, and so undecided
    wall = judge_separate(Side(base[20], tuple(base), 0.03, 6.0, 2), Side(new[20], tuple(new), 0.04, 6.0, 2), 0.10, 0.05)
    assert wall.verdict == UNDECIDED and wall.mde_or_none is not None and wall.mde > 1.28


def test_the_decision_rule_on_synthetic_intervals() -> None:
    assert decide(1.3, 1.05, 1.6, 0.10) == SLOWER  # the interval excludes 1, the estimate is past the threshold
    assert decide(1.08, 1.02, 1.09, 0.10) == UNCHANGED  # slower, but the whole interval is within the band
    assert decide(1.08, 1.02, 1.2, 0.10) == UNDECIDED  # straddles 1.1: neither conclusion
    assert decide(1.3, 0.98, 1.6, 0.10) == UNDECIDED  # 1 is in the interval
    assert decide(0.7, 0.6, 0.8, 0.10) == "faster" and decide(1.0, 0.95, 1.05, 0.10) == UNCHANGED


def test_rounds_of_two_separate_ab_runs_are_independent_replications() -> None:
    """Rounds not from the same ab run (no common `ab` settings): two independent sets of replications."""
    rng = random.Random(3)
    tight = [1.0 + 0.01 * rng.random() for _ in range(12)]
    clear = compare_cell(KEY, cell(tight, unit="round"), cell([2 * x for x in tight], unit="round"), 0.10, 0.05)
    assert clear.verdict == SLOWER and clear.method == "separate rounds" and clear.allowance is None
    few = compare_cell(KEY, cell([1.0, 1.1], unit="round"), cell([2.0, 2.1], unit="round"), 0.10, 0.05)
    assert few.verdict == UNDECIDED and "too few rounds" in few.note and few.mde is None


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
                           "stats": {"median": (data[5] + data[6]) / 2, "iqr": data[9] - data[3], "min": data[0], "mean": sum(data) / 12,
                                     "stddev": 0.0, "rounds": 12, "data": data}})
    path.write_text(json.dumps({"machine_info": {}, "commit_info": {}, "benchmarks": benchmarks}))
    return path


def test_pytest_benchmark_json_is_compared_too(tmp_path: Path) -> None:
    base = pytest_benchmark_file(tmp_path / "a.json", 1.0, 0)
    assert compare_files(base, pytest_benchmark_file(tmp_path / "b.json", 1.0, 1)).slower == []
    slow = compare_files(base, pytest_benchmark_file(tmp_path / "c.json", 2.0, 2))
    assert sorted(c.implementation for c in slow.slower) == ["tiled", "torch_sdpa"]


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
    """Thousands of samples a side: the medians' intervals are narrow, the runs' own noise still bounds the ratio."""
    base = _many_samples_run(tmp_path / "base.json", seed=1, slow=1.0, n=1200)
    again = _many_samples_run(tmp_path / "again.json", seed=2, slow=1.0, n=1200)
    slow = _many_samples_run(tmp_path / "slow.json", seed=3, slow=1.5, n=1200)
    assert main(["compare", str(base), str(again)]) == 0
    capsys.readouterr()
    assert main(["compare", str(base), str(slow), "--json"]) == 1
    result = json.loads(capsys.readouterr().out)
    assert result["slower"] == 2 and all(c["n_base"] == 1200 for c in result["cells"])
