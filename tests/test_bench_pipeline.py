"""The bench runner's steps on synthetic records: a cell's record from what was measured (judging), the roofs
the runner holds beside the cells (roof_readings), and a runner that starts from a resumed file's state and
only ever writes to the file. No worker is started: each step is fed the records a worker would send."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from harness.bench.cell_timing import Measured
from harness.bench.judging import judged, leftover_violation, skipped_cell
from harness.bench.roof_readings import RoofReadings, confirmed, higher
from harness.bench.rounds import Probe, rounds_record
from harness.bench.runner import BenchRunner, case_groups
from harness.bench.settings import BenchSettings
from harness.bench.sweeps import PlannedCell
from harness.bench.timing import TimingConfig
from harness.bench.verdicts import Timed
from harness.case.attention import AttentionCase
from harness.contract.discovery import Registry
from harness.results import Accounting, Bandwidth, BandwidthKey, BenchCell, Integrity, Peak, PeakKey, ResultWriter, Status
from harness.runtime.isolation import OK, Outcome, WorkerPool

CASE = AttentionCase(batch=1, heads=2, tq=64, d=16)
CELL = PlannedCell("impl_a", CASE, "fwd")


def _roofs(published: list[tuple[str, object]] | None = None, **peaks: Peak) -> RoofReadings:
    """Roof readings of ``peaks`` given by their stored text ("float32/cpu"), read into typed keys as a file is."""
    sink = published if published is not None else []
    typed = {PeakKey.from_json(text): peak for text, peak in peaks.items()}
    return RoofReadings(typed, None, TimingConfig(), 1, lambda record, value: sink.append((record, value)))


def _timed(samples: tuple[float, ...], integrity: Integrity | None = None) -> Timed:
    return Timed(samples_s=samples, threads=1, setup_s=0.01, integrity=integrity)


def test_a_failed_timing_is_the_cells_status_with_its_error_and_seconds() -> None:
    measured = Measured(CELL, Outcome("timeout", error="300 s", seconds=300.0), None, 1.0, 301.0)
    cell = judged(measured, _roofs())
    assert (cell.status, cell.reason, cell.seconds, cell.stats) == (Status.TIMEOUT, "300 s", 301.0, None)


def test_an_ok_timing_gives_the_samples_statistics_and_rate() -> None:
    samples = (2e-3, 1e-3, 3e-3)
    cell = judged(Measured(CELL, Outcome(OK, value=_timed(samples)), None, 0.5, 0.2), _roofs())
    assert cell.status == Status.OK and cell.samples_s == samples
    assert cell.median == 2e-3
    assert abs((cell.gflops or 0.0) - (cell.flops or 0.0) / 2e-3 / 1e9) < 1e-9 * (cell.gflops or 1.0)
    assert (cell.predicted_seconds, cell.seconds, cell.integrity) == (0.5, 0.2, None)


def test_processes_left_behind_make_the_cell_a_violation() -> None:
    outcome = Outcome(OK, value=_timed((1e-3,)), leftovers=("pid 12 (sleep)",))
    cell = judged(Measured(CELL, outcome), _roofs())
    assert cell.status == Status.VIOLATION and "pid 12 (sleep)" in (cell.reason or "")
    implausible = BenchCell(implementation="x", case=CASE.to_dict(), case_id=CASE.id, mode="fwd",
                            status=Status.IMPLAUSIBLE, reason="under the floor")
    kept = leftover_violation(implausible, ("pid 1 (x)",))
    assert kept.status == Status.IMPLAUSIBLE and (kept.reason or "").endswith("under the floor")


def test_a_cell_with_evidence_is_judged_against_the_roofs_and_keeps_its_rounds() -> None:
    honest = Integrity(accounting=Accounting(total_s=1.0, loop_s=0.5, captures_s=0.0, phases_s=1.0, checks_s=0.0))
    samples = (0.1, 0.1, 0.1, 0.1, 0.1)
    record = rounds_record([0.1], [5], [0], 1, None, None, Probe(gemm_gflops=[50.0], read_gbps=[10.0]), 2.0)
    peak = Peak(gflops=100.0)
    measured = Measured(CELL, Outcome(OK, value=_timed(samples, honest), seconds=1.0), None, None, 1.0, rounds=record)
    roofs = _roofs(**{"float32/cpu": peak})
    cell = judged(measured, roofs)
    assert cell.status == Status.OK, cell.reason
    assert cell.rounds == record
    assert cell.integrity is not None and cell.integrity.wall_s == 1.0
    assert cell.integrity.floor == roofs.floor(cell, 50.0, 2.0)  # the GEMM read beside the cell bounds the roof
    slowed = Integrity(accounting=Accounting(total_s=0.1, loop_s=0.5, captures_s=0.0, phases_s=0.1, checks_s=0.0))
    cheat = judged(Measured(CELL, Outcome(OK, value=_timed(samples, slowed), seconds=1.0)), roofs)
    assert cheat.status == Status.IMPLAUSIBLE and "slowed or replaced" in (cheat.reason or "")


def test_roofs_start_from_the_resumed_file_and_publish_every_change() -> None:
    published: list[tuple[str, object]] = []
    roofs = _roofs(published, **{"float32/cpu": Peak(gflops=80.0)})
    never_started = WorkerPool(timeout=1.0)  # a peak already read is not measured again: no worker starts
    assert roofs.peak("float32", "cpu", never_started) == 80.0
    assert not never_started.running and published == []
    roofs.set_bandwidth({BandwidthKey("cpu", 1): Bandwidth(read_gbps=10.0)})
    assert published == [("bandwidth", {BandwidthKey("cpu", 1): Bandwidth(read_gbps=10.0)})]


def test_a_confirming_peak_keeps_the_higher_reading_and_both_values() -> None:
    first = Peak(gflops=80.0, fastest_call_gflops=90.0)
    assert confirmed(first, Peak(gflops=100.0, fastest_call_gflops=85.0)) == Peak(
        gflops=100.0, fastest_call_gflops=90.0, first_gflops=80.0, confirmed_gflops=100.0)
    assert confirmed(first, None) == Peak(gflops=80.0, fastest_call_gflops=90.0, first_gflops=80.0)
    assert higher(Peak(gflops=120.0), Peak(gflops=100.0)).gflops == 120.0


def test_the_runner_starts_from_the_files_cells_and_only_writes(tmp_path: Path) -> None:
    settings = BenchSettings(memory_budget_bytes=2.0**30)
    done = judged(Measured(CELL, Outcome(OK, value=_timed((1e-3,)))), _roofs())
    writer = ResultWriter(tmp_path / "run.json", "bench", settings.to_config())
    seen: list[BenchCell] = []
    try:
        start = replace(writer.run, cells=(done,), peaks={PeakKey("float32", "cpu"): Peak(gflops=7.0)})  # as a resumed file
        runner = BenchRunner(settings, writer, Registry(), start, seen.append)
        assert runner.budget.predict(CELL, None)[2].startswith("extrapolated from 1 measured")  # the done cell
        assert runner.roofs.peaks == {PeakKey("float32", "cpu"): Peak(gflops=7.0)}
        skipped = skipped_cell(PlannedCell("impl_b", CASE, "fwd"), "not supported")
        runner.write(skipped)
        assert seen == [skipped] and writer.cells == (skipped,)
        other = PlannedCell("impl_b", CASE, "fwd")
        assert runner.budget.predict(other, None)[2] != "extrapolated from 1 measured size(s) (x1 work)"
        assert runner.judge(Measured(other, Outcome(OK, value=_timed((2e-3,))))).median == 2e-3
        assert runner.budget.predict(other, None)[2].startswith("extrapolated from 1 measured")  # an ok cell feeds it
    finally:
        writer.close()


def test_cases_are_grouped_smallest_work_first() -> None:
    big = AttentionCase(batch=1, heads=2, tq=256, d=16)
    cells = [PlannedCell("a", big, "fwd"), PlannedCell("a", CASE, "fwd"), PlannedCell("b", big, "fwd")]
    groups = case_groups(cells)
    assert [[c.implementation for c in g] for g in groups] == [["a"], ["a", "b"]]
    assert groups[0][0].case == CASE


def test_a_resumed_files_typed_cells_feed_the_budget_as_measured_ones_do(tmp_path: Path) -> None:
    """The budget reads a resumed file's typed cells as they are (no planned cell rebuilt from them): an ok cell
    predicts its implementation's next size as the same cell measured in this run would; others feed nothing."""
    settings = BenchSettings(memory_budget_bytes=2.0**30)
    done = judged(Measured(CELL, Outcome(OK, value=_timed((1e-3, 2e-3)))), _roofs())
    failed = judged(Measured(PlannedCell("impl_b", CASE, "fwd"), Outcome("timeout", error="300 s")), _roofs())
    bigger = PlannedCell("impl_a", AttentionCase(batch=1, heads=2, tq=128, d=16), "fwd")
    writer = ResultWriter(tmp_path / "run.json", "bench", settings.to_config())
    try:
        resumed = BenchRunner(settings, writer, Registry(), replace(writer.run, cells=(done, failed)))
        fresh = BenchRunner(settings, writer, Registry(), writer.run)
        fresh.judge(Measured(CELL, Outcome(OK, value=_timed((1e-3, 2e-3)))))
        assert resumed.budget.history == fresh.budget.history and len(resumed.budget.history) == 1
        assert resumed.budget.predict(bigger, None) == fresh.budget.predict(bigger, None)
        assert resumed.budget.predict(PlannedCell("impl_b", CASE, "fwd"), None)[2] == \
            fresh.budget.predict(PlannedCell("impl_b", CASE, "fwd"), None)[2]
    finally:
        writer.close()
