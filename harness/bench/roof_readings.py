"""The roofs a cell is held against, measured beside the cells: the run's GEMM peaks and memory bandwidth.

A cell's "% of peak", "% of bandwidth" and its physics floor (:func:`harness.bench.roofs.physics_floor`)
divide by roofs read on this machine, on the cells' own clock, in the peak worker where no plugin code runs.
Each (dtype, device) peak and each (device, threads) bandwidth is measured once, before the first cell that
needs it, and confirmed after the last (the higher reading kept: a transient slowdown only ever lowers a
rate). :class:`RoofReadings` holds these records for the run, starting from what a resumed file already
holds, and writes each change to the result file; nothing reads them back from the file.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from harness.bench.roofs import cpu_roofs, physics_floor
from harness.bench.tasks import bandwidth_task, clock_for, peak_task
from harness.bench.timing import TimingConfig
from harness.results import Bandwidth, BandwidthKey, BenchCell, Floor, Peak, PeakKey
from harness.runtime.isolation import OK, Outcome, Task, WorkerPool
from harness.runtime.process_tree import usable_cpus


def failed(outcome: Outcome) -> str:
    """A failed task's outcome in words, as a record's ``error``."""
    return f"{outcome.status}: {outcome.error}"


class RoofReadings:
    """The run's ``peaks`` and ``bandwidth`` records and this machine's theoretical roofs; ``publish`` writes a
    record (``"peaks"`` or ``"bandwidth"``) to the result file each time it changes."""

    def __init__(self, peaks: Mapping[PeakKey, Peak], bandwidth: Mapping[BandwidthKey, Bandwidth] | None, timing: TimingConfig,
                 threads: int, publish: Callable[[str, Any], None]) -> None:
        self.peaks: dict[PeakKey, Peak] = dict(peaks)
        self.bandwidth: dict[BandwidthKey, Bandwidth] = dict(bandwidth or {})
        self.timing, self.threads, self.publish = timing, threads, publish
        self.machine = cpu_roofs()
        """This machine's theoretical roofs (:mod:`harness.bench.roofs`): the physics floor of local cells."""

    def set_peaks(self, peaks: dict[PeakKey, Peak]) -> None:
        self.peaks = peaks
        self.publish("peaks", peaks)

    def set_bandwidth(self, records: dict[BandwidthKey, Bandwidth]) -> None:
        self.bandwidth = records
        self.publish("bandwidth", records)

    def _clock(self, device: str) -> str:
        return clock_for(self.timing, device)

    def peak(self, dtype: str, device: str, pool: WorkerPool) -> float | None:
        """The GEMM peak of (dtype, device) in GFLOP/s, measured in ``pool`` the first time it is asked for."""
        key = PeakKey(dtype, device)
        if key not in self.peaks:
            outcome = pool.run(Task(key, peak_task, (dtype, device, self.threads, self._clock(device), self.timing.roof_budget_s)))
            measured = outcome.value if outcome.status == OK else Peak(error=failed(outcome))
            self.set_peaks({**self.peaks, key: measured})
        return self.peaks[key].gflops

    def measure_bandwidth(self, device: str, pool: WorkerPool) -> None:
        """Measure the memory bandwidth once per run (device and thread count), before the first cell."""
        key = BandwidthKey(device, self.threads)
        if key in self.bandwidth:
            return
        outcome = pool.run(Task(key, bandwidth_task, (device, self.threads, self._clock(device), self.timing.roof_budget_s)))
        self.set_bandwidth({**self.bandwidth, key: outcome.value if outcome.status == OK
                            else Bandwidth(error=failed(outcome))})

    def confirm(self, pool: WorkerPool) -> None:
        """Measure each peak again after the cells and keep the higher, in the run's peaks record; then the
        bandwidth likewise.

        A transient slowdown (frequency scaling, a neighbour on the cores) only ever lowers a
        GEMM's rate, so one low reading at the start would inflate every cell's % of peak. Cells
        are not touched: their % of peak is computed on reading, from this record.
        """
        peaks = dict(self.peaks)
        for key, peak in peaks.items():
            if not peak.gflops or peak.confirmed_gflops is not None:
                continue
            outcome = pool.run(Task(key, peak_task, (key.dtype, key.device, self.threads, self._clock(key.device),
                                                                 self.timing.roof_budget_s)))
            reading: Peak | None = outcome.value if outcome.status == OK else None
            peaks[key] = confirmed(peak, reading)
        self.set_peaks(peaks)
        self._confirm_bandwidth(pool)

    def _confirm_bandwidth(self, pool: WorkerPool) -> None:
        """As for the peaks: measure the bandwidth again after the cells and keep the higher reading."""
        records = dict(self.bandwidth)
        for key, record in records.items():
            if not record.read_gbps or record.confirmed_read_gbps is not None:
                continue
            outcome = pool.run(Task(key, bandwidth_task, (key.device, self.threads, self._clock(key.device),
                                                                      self.timing.roof_budget_s)))
            if outcome.status != OK:
                continue
            records[key] = record.higher(outcome.value, confirm=True)
        if records:
            self.set_bandwidth(records)

    def floor(self, cell: BenchCell, gemm_beside: float | None = None, headroom: float | None = None,
              thread_gflops: float | None = None, clock: str = "wall") -> Floor:
        """The physics floor of ``cell`` (:func:`~harness.bench.roofs.physics_floor`) from these roofs, and the
        GEMM read beside it in its rounds with the CPU's headroom over it, when it was timed in rounds.
        ``thread_gflops`` (one thread's GEMM on its CPU clock) counts once for a cell on the CPU clock, whose
        samples add up its threads' CPU, and once per CPU this process may run on for a wall-clock cell."""
        device = cell.case.device or "cpu"
        kind = None if cell.node is None else cell.node.kind
        bandwidth = self.bandwidth.get(BandwidthKey(device, cell.threads, kind))
        peak = None if cell.peak_key is None else self.peaks.get(cell.peak_key)
        threads = None
        if thread_gflops and cell.node is None:  # a node's CPUs are not ours
            threads = thread_gflops * (1 if clock == "cpu" else usable_cpus())
        return physics_floor(cell.flops or 0.0, cell.bytes or 0.0, str(cell.case.dtype), device, peak, bandwidth,
                             None if cell.node else self.machine, gemm_beside, headroom, threads)


def confirmed(peak: Peak, reading: Peak | None) -> Peak:
    """``peak`` confirmed by a second ``reading`` after the cells (None: it failed): the higher GFLOP/s is
    kept, and both readings, as ``first_gflops`` and ``confirmed_gflops``. A transient slowdown only ever
    lowers a GEMM's rate, so the higher reading is the truer one."""
    return replace(higher(peak, reading), first_gflops=peak.gflops, confirmed_gflops=None if reading is None else reading.gflops)


def higher(peak: Peak, reading: Peak | None) -> Peak:
    """``peak`` with a later ``reading`` folded in: the higher GFLOP/s, and the fastest call of either."""
    if reading is None:
        return replace(peak, gflops=max(peak.gflops or 0.0, 0.0))
    return replace(peak, gflops=max(peak.gflops or 0.0, reading.gflops or 0.0),
                   fastest_call_gflops=max(peak.fastest_call_gflops or 0.0, reading.fastest_call_gflops or 0.0))
