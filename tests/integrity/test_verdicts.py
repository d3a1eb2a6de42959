"""The parent's verdict and the physics floor, on numbers: what each status needs and what it says."""

from __future__ import annotations

from typing import Any

import pytest

from harness.analysis.comparison import FASTER
from harness.analysis.stats import summarize
from harness.bench.roofs import cpu_roofs, physics_floor
from harness.bench.verdicts import judge
from harness.report.compare import NEWLY_FAILING, NOT_COMPARABLE, compare_cell
from harness.results import BenchCell, Status


def _value(samples: list[float], **integrity: Any) -> dict[str, Any]:
    timed = sum(samples)
    accounting = {"total_s": 1.0, "phases_s": 1.0, "loop_s": timed + 0.01, "captures_s": 0.01}
    return {"samples_s": samples, "integrity": {"accounting": accounting, **integrity}}


FLOOR = physics_floor(8e9, 1e7, "float32", "cpu", {"gflops": 50.0, "fastest_call_gflops": 60.0},
                      {"read_gbps": 10.0}, {"gflops": {"float32": 600.0}, "load_gbps": 1000.0, "method": "test"})


def test_the_floor_takes_the_larger_of_theory_and_twice_the_measured_roofs() -> None:
    assert FLOOR["compute_roof_gflops"] == 600.0 and FLOOR["memory_roof_gbps"] == 1000.0
    assert abs(FLOOR["floor_s"] - 8e9 / 600e9) < 1e-12
    measured_only = physics_floor(8e9, 1e7, "float32", "cuda", {"fastest_call_gflops": 60.0}, None, None)
    assert measured_only["compute_roof_gflops"] == 120.0


@pytest.mark.tier  # this CPU's roofs
def test_this_machines_theoretical_roof_is_above_what_any_measurement_here_reaches() -> None:
    roofs = cpu_roofs()
    assert roofs["gflops"]["float32"] >= 16 and roofs["load_gbps"] > 0 and "GHz" in roofs["method"]


def test_a_call_under_the_floor_is_implausible_with_the_numbers() -> None:
    status, reason = judge(_value([1e-6, 2e-6]), 1.0, FLOOR)
    assert status == Status.IMPLAUSIBLE and "physics floor" in (reason or "") and "600 GFLOP/s" in (reason or "")
    assert judge(_value([0.02, 0.03]), 1.0, FLOOR) == (Status.OK, None)


def test_calls_read_under_the_floor_are_noise_until_they_are_the_median() -> None:
    # a sample is a round trip less the fastest null trip: beside busy loops a quarter of a tiny cell's calls read 0 ns
    honest = [0.02] * 14 + [0.0] * 5 + [1e-9]
    assert judge(_value(honest), 1.0, FLOOR) == (Status.OK, None)
    cheat = [0.02] * 9 + [1e-6] * 11  # the median under the floor
    status, reason = judge(_value(cheat), 1.0, FLOOR)
    assert status == Status.IMPLAUSIBLE and "median timed call 1 µs" in (reason or ""), reason


def test_a_worker_clock_that_disagrees_with_the_parents_is_implausible() -> None:
    status, reason = judge(_value([0.02, 0.03]), 4.0, FLOOR)  # the worker counted 1 s of a 4 s task
    assert status == Status.IMPLAUSIBLE and "parent's clock" in (reason or "")
    hidden = _value([0.02, 0.03])
    hidden["integrity"]["accounting"]["loop_s"] = 0.9  # 0.85 s in the loop that no sample shows
    assert "samples do not show" in (judge(hidden, 1.0, FLOOR)[1] or "")


def test_violations_and_wrong_outputs_name_what_was_found() -> None:
    status, reason = judge(_value([0.02], clock="time.perf_counter replaced"), 1.0, FLOOR)
    assert status == Status.VIOLATION and "perf_counter" in (reason or "")
    spinning = _value([0.02], cpu_after_s=[0.014, 0.015], spin_s=0.002)  # a pool spinning after the calls: honest
    assert judge(spinning, 1.0, FLOOR) == (Status.OK, None)
    status, reason = judge(_value([0.02], output_problems=["timed sample 3 (input set 1), rows [0, 7]: max|err|"]),
                           1.0, FLOOR)
    assert status == Status.WRONG and "timed sample 3" in (reason or "")


def _cell(status: Status, median: float) -> BenchCell:
    """A cell as every writer stores it: its samples and their summary."""
    samples = (median,) * 9
    return BenchCell(implementation="x", case={}, case_id="c", mode="fwd", status=status, samples_s=samples,
                     stats=summarize(samples))


def test_compare_never_counts_an_implausible_cell_as_a_speedup() -> None:
    key = ("x", "c", "fwd")
    assert compare_cell(key, _cell(Status.OK, 1.0), _cell(Status.OK, 0.1), 0.25, 0.05).verdict == FASTER
    assert compare_cell(key, _cell(Status.OK, 1.0), _cell(Status.IMPLAUSIBLE, 1e-6), 0.25, 0.05).verdict == NEWLY_FAILING
    assert compare_cell(key, _cell(Status.IMPLAUSIBLE, 1e-6), _cell(Status.OK, 1.0), 0.25, 0.05).verdict == NOT_COMPARABLE


def test_a_busy_machine_cannot_raise_the_floor_the_threads_cpu_clock_gemm_holds_it() -> None:
    """A wall-clock GEMM read beside the cell on a busy machine reads low (its threads wait for a core); one
    thread's GEMM on its own CPU clock does not, and the roof takes the faster."""
    peak = {"gflops": 100.0, "fastest_call_gflops": 105.0}  # the run's peak, read as busy as the rest
    theory = {"gflops": {"float32": 600.0}, "load_gbps": 1000.0, "method": "test"}
    busy = physics_floor(2e9, 1e6, "float32", "cpu", peak, None, theory, beside_gflops=20.0, headroom=2.0)
    held = physics_floor(2e9, 1e6, "float32", "cpu", peak, None, theory, beside_gflops=20.0, headroom=2.0,
                         threads_gflops=2 * 115.0)
    assert busy["compute_roof_gflops"] == pytest.approx(105.0 * 2 * 1.1)
    assert held["compute_roof_gflops"] == pytest.approx(230.0 * 2 * 1.1)
    honest = _value([2e9 / 300e9] * 3)  # an AVX-512 kernel at 300 GFLOP/s, near 3x torch's AVX2 GEMM: honest here
    assert judge(honest, 1.0, busy)[0] == Status.IMPLAUSIBLE and judge(honest, 1.0, held) == (Status.OK, None)
