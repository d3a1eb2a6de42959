"""Noise never decides a headline; a cell faster than the roof measured beside it is a measurement problem.

Synthetic cells and frames only: the decisions, not the machine."""

from __future__ import annotations

import pandas as pd
import pytest

from harness.report.headline import ratio_interval, winner
from harness.report.load import ROOF_PROBLEM_BYTES, rounds_columns
from harness.results import BenchCell, Rounds, Stats


def _at(rows: list[dict[str, object]]) -> pd.DataFrame:
    return pd.DataFrame(rows).sort_values("median")


def test_a_margin_whose_paired_interval_excludes_1_is_stated_with_it() -> None:
    at = _at([{"implementation": "a", "median": 1.0, "round_medians_s": [1.0, 2.0, 1.0, 3.0, 1.0, 1.0]},
              {"implementation": "b", "median": 1.3, "round_medians_s": [1.3, 2.5, 1.4, 3.8, 1.25, 1.3]}])
    text = winner(at)
    assert text.startswith("a, 1.30x faster than b ([1.25, 1.40], 97% interval over 6 interleaved rounds)"), text


def test_a_margin_the_rounds_cannot_tell_from_1_is_a_tie() -> None:
    at = _at([{"implementation": "a", "median": 1.0, "round_medians_s": [1.0, 1.0, 1.0, 1.0, 1.0, 1.0]},
              {"implementation": "b", "median": 1.05, "round_medians_s": [1.2, 0.9, 1.1, 0.95, 1.05, 1.3]}])
    assert winner(at).startswith("a and b tied within noise (1.05x, [0.90, 1.30]")


def test_without_rounds_the_quartiles_decide_and_a_noisy_cell_ties() -> None:
    steady = {"implementation": "a", "median": 1.0, "samples_s": [0.99, 1.0, 1.01, 1.0]}
    noisy = {"implementation": "b", "median": 2.4, "samples_s": [0.5, 2.4, 6.0, 2.4, 0.7]}
    clear = {"implementation": "c", "median": 2.0, "samples_s": [1.98, 2.0, 2.02, 2.0]}
    assert "tied within noise" in winner(_at([steady, noisy]))
    assert winner(_at([steady, clear])).startswith("a, 2.00x faster than c (")
    found = ratio_interval(pd.Series(steady), pd.Series(clear))
    assert found is not None and found[0] > 1.9 and found[2] == "interquartile ranges"
    assert "no interval" in winner(_at([{"implementation": "a", "median": 1.0}, {"implementation": "b", "median": 2.0}]))


def _cell(gflops: float, gbps_bytes: float, rounds: Rounds) -> BenchCell:
    return BenchCell(implementation="k", case={}, case_id="c", mode="fwd", status="ok", gflops=gflops,
                     bytes=gbps_bytes, stats=Stats(median=1.0), rounds=rounds)


def test_a_cell_above_the_gemm_measured_beside_it_is_a_measurement_problem() -> None:
    row = rounds_columns(_cell(120.0, 1e6, Rounds(gemm_gflops=100.0, read_gbps=50.0)))
    assert row["pct_peak_beside"] == pytest.approx(120.0)
    assert "120% of the GEMM peak measured beside it" in str(row["roof_problem"])
    assert rounds_columns(_cell(99.0, 1e6, Rounds(gemm_gflops=100.0, read_gbps=50.0)))["roof_problem"] is None
    # on a CPU whose widest unit does twice the FMAs of the GEMM's AVX2 code, 150% of the GEMM is a kernel's to reach
    assert rounds_columns(_cell(150.0, 1e6, Rounds(gemm_gflops=100.0, gemm_headroom=2.0)))["roof_problem"] is None
    assert "210% of the GEMM" in str(rounds_columns(_cell(210.0, 1e6, Rounds(gemm_gflops=100.0, gemm_headroom=2.0)))["roof_problem"])


def test_bandwidth_above_the_probe_is_a_problem_only_beyond_the_caches() -> None:
    big = ROOF_PROBLEM_BYTES * 2.0  # 0.27 GB in 1 s: 0.27 GB/s against a 0.1 GB/s probe
    assert "read bandwidth measured beside it" in str(rounds_columns(_cell(1.0, big, Rounds(read_gbps=0.1)))["roof_problem"])
    small = ROOF_PROBLEM_BYTES / 4  # served from the caches: faster than a 256 MiB read is no fault
    assert rounds_columns(_cell(1.0, small, Rounds(read_gbps=0.01)))["roof_problem"] is None


def test_a_cell_not_timed_in_rounds_has_empty_round_columns() -> None:
    cell = BenchCell(implementation="k", case={}, case_id="c", mode="fwd", status="ok")
    assert set(rounds_columns(cell).values()) == {None}
