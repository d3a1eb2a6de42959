"""`report` time is linear in a sweep's sizes: each fit makes a bounded number of refits (the leave-one-size-out
estimates spread over at most 16 sizes, the ends always among them), and a short sweep is fitted exactly as
before. Figures (seconds per report against the sizes): ``python3 -m benchmarks.report_scaling``."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from test_report_data import write_bench_run

from harness.analysis.costmodel import MAX_LEFT_OUT, falls, fit_cost, left_out
from harness.report.builder import STAGES, build_report
from harness.report.settings import ReportSettings


@pytest.mark.parametrize("n", [1, 4, 16, 17, 100, 1000, 10_000])
def test_the_refits_per_fit_are_bounded_and_keep_the_ends(n: int) -> None:
    chosen = left_out(n)
    assert len(chosen) == min(n, MAX_LEFT_OUT) and chosen == sorted(set(chosen))
    assert chosen[0] == 0 and chosen[-1] == n - 1 and all(0 <= i < n for i in chosen)
    if n <= MAX_LEFT_OUT:
        assert chosen == list(range(n))  # short sweeps: every size left out in turn, as always


def test_a_long_sweep_fits_its_exponent() -> None:
    xs = np.arange(16, 16 + 8 * 2000, 8, dtype=float)  # 2000 sizes: thousands of refits before the bound
    ys = 1e-6 + 1e-9 * xs**2
    fit = fit_cost(xs, ys, theory=2.0, replicates=50)
    assert fit.low <= 2.0 <= fit.high and abs(fit.exponent - 2.0) < 0.05


def test_falls_is_the_largest_fall_along_the_series() -> None:
    rng = np.random.default_rng(0)
    for _ in range(100):
        values = rng.uniform(0.1, 10, size=int(rng.integers(1, 30)))
        logs = np.log(values)
        expected = max([0.0, *(logs[i] - logs[i + 1:].min() for i in range(len(logs) - 1))])
        assert math.isclose(falls(values), expected, abs_tol=1e-12)


def test_the_report_tells_its_stages(tmp_path: Path) -> None:
    heard: list[str] = []
    build_report(ReportSettings((write_bench_run(tmp_path / "b.json"),), tmp_path / "r"), on_stage=heard.append)
    assert heard == list(STAGES)
