"""Run a bench plan: every cell admitted, timed in a worker, judged and written as it comes.

The runner is the pipeline over typed records; each step is a module of its own:
:mod:`~harness.bench.admission` (capabilities, then the budgets) -> :mod:`~harness.bench.cell_timing` (the
cell timed alone or in rounds, its memory measured: a :class:`~harness.bench.cell_timing.Measured`) ->
:mod:`~harness.bench.judging` (its :class:`~harness.results.BenchCell`, judged against the roofs
:mod:`~harness.bench.roof_readings` read beside the cells) -> the value probe, on the cells
:class:`~harness.bench.values.ProbePicker` picks (:mod:`~harness.bench.values`: the cell's case timed again under
other distributions of its input values, its raw samples added to the cell) -> the result file. The worker side of
each step is :mod:`harness.bench.tasks` (the probe's, :func:`~harness.bench.values.value_probe_task`).

Worker pools, used one at a time (two cores: a measure must never compete with another): a
peak worker that runs only the GEMM peak (no plugin code ever runs there), and per
implementation a timing worker for the timed calls and a memory worker, whose
allocator is set up for exact RSS accounting (:mod:`harness.bench.memory`), runs the separate
memory measures. Each task has a timeout; a crash, a hang or an exception costs its cell
only, and is recorded as such. Every cell is written to the result file the moment it is
known, so an interrupted run leaves a valid file that ``--resume`` finishes. The runner keeps
its own state (the budget's history, the roofs) and only writes to the file, never reads it back.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable

from harness.bench import guard
from harness.bench.admission import admit
from harness.bench.cell_timing import CellTimer, Measured, Pools
from harness.bench.driven import Listener
from harness.bench.judging import judged
from harness.bench.roof_readings import RoofReadings
from harness.bench.settings import BenchSettings
from harness.bench.sweeps import Budget, PlannedCell
from harness.bench.timing import thread_environment
from harness.bench.values import ProbePicker, probeable, value_probe_task
from harness.contract.discovery import Registry
from harness.reference.flops import attention_flops
from harness.results import BenchCell, ResultWriter, Run, Status, ValueProbe
from harness.results.cells import with_
from harness.runtime.isolation import OK, Task, WorkerPool, memory_cap


def case_groups(cells: list[PlannedCell]) -> list[list[PlannedCell]]:
    """The cells grouped by (case, mode), smallest work first; within a group in the plan's order."""
    ordered = sorted(cells, key=lambda c: (attention_flops(c.case, c.mode), c.case.id, c.mode))
    return [list(group) for _, group in itertools.groupby(ordered, key=lambda c: (c.case.id, c.mode))]


class BenchRunner:
    """Measures planned cells into a :class:`ResultWriter`; ``on_cell`` sees each finished cell.

    ``start`` is the run as its file held it when opened: a resumed run's cells feed the budget's predictions
    and its peaks and bandwidth are kept (a new run's: empty)."""

    def __init__(self, settings: BenchSettings, writer: ResultWriter, registry: Registry, start: Run,
                 on_cell: Callable[[BenchCell], None] = lambda cell: None) -> None:
        self.settings = settings
        self.writer = writer
        self.registry = registry
        self.on_cell = on_cell
        self.budget = Budget(settings.memory_budget_bytes or 0.0, settings.cell_budget_s,  # the session's: resolved
                             settings.timing.min_samples, settings.timing.warmup_s, timeout_s=settings.timeout_s)
        for done in start.bench_cells():  # a resumed run predicts from what it measured before: its typed cells
            case = done.case.typed  # a kernel's AttentionCase or a module's ModuleCase: both read as the budget reads
            if done.status == Status.OK and done.median and case is not None:
                self.budget.record(done.implementation, case, done.mode,  # type: ignore[arg-type]
                                   done.median, done.peak_extra_bytes)
        self.roofs = RoofReadings(start.peaks, start.bandwidth, settings.timing, settings.threads, writer.set)
        self.done = tuple(start.bench_cells())
        self.picker = ProbePicker("off", ())

    def run(self, todo: list[PlannedCell]) -> None:
        """Measure ``todo``: the cells left (the session drops those the file already holds, once)."""
        from threadpoolctl import threadpool_limits

        peak = WorkerPool(timeout=self.settings.timeout_s, start_method="forkserver")
        # this process's own BLAS on one thread: a BLAS pool's threads spin for a while after each call, and here
        # they would spin on the cores the workers' timed calls run on
        with threadpool_limits(1, user_api="blas"), thread_environment(self.settings.threads), peak as peak_pool, \
                contextlib.ExitStack() as stack:
            listener = Listener()
            stack.callback(listener.close)
            declared = {name: self.registry.get(name) for name in self.registry.sources}
            timer = CellTimer(self.settings, self.registry.sources,
                              {name: impl.declared.backend for name, impl in declared.items()}, listener, declared)
            pools_of = _pools(stack, self.settings.timeout_s, self.budget.memory_bytes)
            groups = case_groups(todo)  # smallest work first: the budget's predictions have history
            self.picker = ProbePicker(self.settings.value_probe, (c for g in groups for c in g), probeable, self.done)
            for group in groups:
                self._measure_case(group, timer, pools_of, peak_pool)
            self.roofs.confirm(peak_pool)

    def _measure_case(self, group: list[PlannedCell], timer: CellTimer, pools_of: Pools,
                      peak_pool: WorkerPool) -> None:
        """Every implementation's cell of one (case, mode): in rounds (:mod:`harness.bench.rounds`) on a CPU
        with the checks on, else one after another."""
        admitted: list[tuple[PlannedCell, float | None]] = []
        for cell in group:
            verdict = admit(cell, self.registry, self.budget, self.roofs, pools_of(cell.implementation)[0], peak_pool)
            if isinstance(verdict, BenchCell):
                self.write(verdict)
            else:
                admitted.append((cell, verdict))
        if not admitted:
            return
        if self._in_rounds(admitted):  # in groups whose workers' inputs fit in memory together
            for members in self.budget.held_together([cell for cell, _ in admitted]):
                for each in timer.rounds([admitted[i] for i in members], pools_of, peak_pool):
                    self.write(self.probed(self.judge(each), pools_of))
            return
        for cell, predicted_s in admitted:  # one at a time: each cell written before the next is timed
            self.write(self.probed(self.judge(timer.alone(cell, predicted_s, *pools_of(cell.implementation))), pools_of))

    def _in_rounds(self, admitted: list[tuple[PlannedCell, float | None]]) -> bool:
        """Whether a case's cells are timed in rounds: on a CPU, with the checks on, and kernels only (a module's
        calls are the layers' (:mod:`harness.bench.module_cells`), timed alone on their own loop)."""
        timing = self.settings.timing
        kernels = all(self.registry.get(cell.implementation).declared.kind == "kernel" for cell, _ in admitted)
        return timing.rounds > 1 and timing.checks and admitted[0][0].case.device == "cpu" and kernels

    def judge(self, measured: Measured) -> BenchCell:
        """The cell's record from what was measured (here or on a node); an ``ok`` cell feeds the budget."""
        cell = judged(measured, self.roofs)
        if cell.status == Status.OK:
            planned = measured.cell
            self.budget.record(planned.implementation, planned.case, planned.mode, cell.median or 0.0,
                               cell.peak_extra_bytes)
        return cell

    def probed(self, cell: BenchCell, pools_of: Pools) -> BenchCell:
        """``cell`` with the value probe's raw times when the picker wants it probed (:mod:`harness.bench.values`),
        timed in its implementation's timing worker; a probe that fails says why in its record, and the cell's
        own time stands."""
        if not self.picker.wants(cell):
            return cell
        name = cell.implementation
        case = cell.attention_case
        assert case is not None  # a probeable cell is a kernel's
        args = (name, self.registry.sources[name], case.to_dict(), cell.mode, self.settings.timing, self.settings.threads)
        outcome = pools_of(name)[0].run(Task(cell.key, value_probe_task, args, end_leftovers=True))
        if outcome.status == OK and isinstance(outcome.value, ValueProbe):
            return with_(cell, value_probe=outcome.value)  # type: ignore[return-value]
        why = f"{outcome.status}: {outcome.error}" if outcome.error else str(outcome.status)
        return with_(cell, value_probe=ValueProbe(clock=self.settings.timing.clock, error=why))  # type: ignore[return-value]

    def write(self, cell: BenchCell) -> None:
        """Write ``cell`` to the result file now (an interrupted run keeps it) and tell ``on_cell``."""
        self.writer.add(cell)
        self.on_cell(cell)


def _pools(stack: contextlib.ExitStack, timeout_s: float, budget_bytes: float) -> Pools:
    """An implementation's (timing, memory) workers, started when first asked for and kept for the run."""
    pools: dict[str, tuple[WorkerPool, WorkerPool]] = {}
    # past it an allocation fails, said as such: the budget a call may take, plus the input sets a cell holds
    cap = memory_cap(budget_bytes + guard.SETS_BYTES)

    def pools_of(name: str) -> tuple[WorkerPool, WorkerPool]:
        # Workers of its own per implementation, kept for the run: a plugin that changes process state
        # (torch's default dtype, NumPy's error mode, thread counts) must not change what another sees.
        if name not in pools:
            # held stopped between their tasks: an idle contender's threads burn nothing while another is timed
            pools[name] = (stack.enter_context(WorkerPool(timeout=timeout_s, memory_limit=cap, start_method="forkserver",
                                                          held=True)),
                           stack.enter_context(WorkerPool(timeout=timeout_s, memory_limit=cap, held=True)))
        return pools[name]

    return pools_of
