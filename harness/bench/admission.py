"""Whether a planned cell is timed at all: the implementation's capabilities, then the run's budgets.

Decided in the parent, cell by cell, just before the cell would be timed: first what the implementation
declares it cannot run and its own ``available=`` check (run in its timing worker, never here:
:func:`harness.contract.availability.unsupported`), then, from the GEMM peak read beside the cells and the
cells measured before, whether the cell is predicted to fit the time and memory budgets
(:class:`~harness.bench.sweeps.Budget`). A cell turned away gets its record here, saying why.
"""

from __future__ import annotations

from harness.bench.judging import new_cell, skipped_cell
from harness.bench.roof_readings import RoofReadings
from harness.bench.sweeps import Budget, PlannedCell
from harness.contract.availability import unsupported
from harness.contract.discovery import Registry
from harness.results import BenchCell, Status
from harness.runtime.isolation import Outcome, WorkerPool


def capability_gate(cell: PlannedCell, registry: Registry, timing_pool: WorkerPool) -> BenchCell | None:
    """The cell's record when its implementation cannot run it (declared, or said by its ``available=`` check,
    which runs in ``timing_pool``); None when it can."""
    impl = registry.get(cell.implementation)
    source = registry.sources[cell.implementation]
    reasons = unsupported(impl, cell.case.with_(grad=cell.mode != "fwd"), source, timing_pool)  # in the worker
    if isinstance(reasons, Outcome):  # its available= check crashed or hung: the cell's own outcome
        return new_cell(cell, Status(reasons.status), reasons.error, seconds=reasons.seconds)
    if reasons:
        return skipped_cell(cell, "; ".join(reasons))
    return None


def admit(cell: PlannedCell, registry: Registry, budget: Budget, roofs: RoofReadings, timing_pool: WorkerPool,
          peak_pool: WorkerPool) -> BenchCell | float | None:
    """The cell skipped (unsupported, over budget), or its predicted seconds (None: no prediction). The roofs of
    its (dtype, device) are measured in ``peak_pool`` before its first cell is admitted."""
    turned_away = capability_gate(cell, registry, timing_pool)
    if turned_away is not None:
        return turned_away
    peak = roofs.peak(cell.case.dtype, cell.case.device, peak_pool)
    roofs.measure_bandwidth(cell.case.device, peak_pool)
    over = budget.check(cell, peak)
    if over:
        return skipped_cell(cell, over)
    return budget.cell_seconds_predicted(cell, peak)
