"""A cell's record from what was measured: its numbers, its verdict, the reason a cell was not timed.

The parent turns each :class:`~harness.bench.cell_timing.Measured` into the :class:`~harness.results.BenchCell`
the result file holds: the statistics of its samples, its memory, its GFLOP/s, and, for a cell whose worker
sent its evidence, the verdict (:func:`harness.bench.verdicts.judge`) against the physics floor of the roofs
read beside it (:class:`~harness.bench.roof_readings.RoofReadings`). A cell that is not timed (skipped,
its ``available=`` check failed) gets its record here too, so every cell is built in one place.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

from harness.analysis.stats import summarize
from harness.bench.cell_timing import Measured
from harness.bench.roof_readings import RoofReadings, failed
from harness.bench.sweeps import PlannedCell
from harness.bench.verdicts import Timed, judge
from harness.reference.flops import attention_flops, compulsory_bytes
from harness.results import BenchCell, CellCase, Memory, Node, PeakKey, Status
from harness.runtime.isolation import OK


def new_cell(cell: PlannedCell, status: Status, reason: str | None, **measured: Any) -> BenchCell:
    """The record of planned ``cell`` with ``status``, its work and compulsory bytes, and what was ``measured``."""
    node: Node | None = measured.get("node")
    kind = None if node is None else node.kind  # on a cluster: the peak of the node's kind
    return BenchCell(implementation=cell.implementation, case=CellCase.of(cell.case), case_id=cell.case.id,
                     mode=cell.mode, status=status, reason=reason, flops=attention_flops(cell.case, cell.mode),
                     peak_key=PeakKey(cell.case.dtype, cell.case.device, kind),
                     bytes=float(compulsory_bytes(cell.case, cell.mode)), **measured)


def skipped_cell(cell: PlannedCell, reason: str) -> BenchCell:
    return new_cell(cell, Status.SKIPPED, reason)


def judged(measured: Measured, roofs: RoofReadings) -> BenchCell:
    """The cell from its timing and memory outcomes (here or on a node, ``where`` it ran), judged."""
    cell, timing, where = measured.cell, measured.timing, dict(measured.where)
    if timing.status != OK:
        return new_cell(cell, Status(timing.status), timing.error, traceback=timing.traceback, seconds=measured.seconds,
                        **where)
    timed: Timed = timing.value
    stats = summarize(timed.samples_s)
    median = stats.median or 0.0  # summarize fills it
    memory = None
    if measured.memory is not None:
        memory = measured.memory.value if measured.memory.status == OK else Memory(error=failed(measured.memory))
    where = {"load_average": _load_average(), **where}  # a node's own load average when it sent one
    result = new_cell(cell, Status.OK, None, samples_s=timed.samples_s, stats=stats, threads=timed.threads,
                      memory=memory, predicted_seconds=measured.predicted_s, setup_s=timed.setup_s,
                      profile=timed.profile, **where)
    result = replace(result, gflops=(result.flops or 0.0) / median / 1e9, seconds=measured.seconds)
    if timed.integrity is not None:
        rounds = measured.rounds
        stamps = timed.integrity.stamps
        clock = stamps.clock if stamps is not None and stamps.clock else "wall"
        floor = roofs.floor(result, rounds.gemm_gflops, rounds.gemm_headroom, rounds.thread_gemm_gflops, clock) \
            if rounds else roofs.floor(result)
        status, reason = judge(timed, timing.seconds, floor)
        integrity = replace(timed.integrity, floor=floor, wall_s=timing.seconds)
        result = replace(result, status=status, reason=reason, integrity=integrity)
    if timing.leftovers:  # a process the call started ran on beside the timing (killed now)
        result = leftover_violation(result, timing.leftovers)
    return result if measured.rounds is None else replace(result, rounds=measured.rounds)


def leftover_violation(cell: BenchCell, leftovers: tuple[str, ...]) -> BenchCell:
    """``cell`` as a violation: its calls left processes running (work outside the timed calls, and
    processes that would outlive the run); they were killed when the task returned."""
    said = f"{len(leftovers)} process(es) the calls started were still running after the task: " \
           f"{', '.join(leftovers[:5])}{' ...' if len(leftovers) > 5 else ''} (killed; a call must not leave " \
           "processes behind)"
    reason = said if cell.status == Status.OK or not cell.reason else f"{said}; {cell.reason}"
    status = cell.status if cell.status == Status.IMPLAUSIBLE else Status.VIOLATION  # the verdicts' order
    return replace(cell, status=status, reason=reason)


def _load_average() -> float | None:
    """1-minute load average while the cell ran: explains a noisy cell on a shared machine."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return None
