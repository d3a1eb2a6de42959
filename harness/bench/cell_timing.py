"""The parent's side of timing a cell: its tasks submitted to the implementation's workers, its outcomes kept.

A cell is timed alone (one timing task, then its memory task) or, on a CPU with the checks on, in shuffled
rounds with the other implementations of its case and the roof probe (:mod:`harness.bench.rounds`). A CPU
kernel cell's calls are driven by the parent (:mod:`harness.bench.driven`): its clock, its inputs, its checks.
Either way it comes back with a :class:`Measured` record per cell: the outcomes as the workers sent them and what the parent saw, before
any verdict (:mod:`harness.bench.judging` gives that). Kept apart from the runner so that how a cell is timed
reads on its own, and the runner as a pipeline: admit, time, judge, write.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from harness.bench.driven import Drive, Listener, ParentSet, driving
from harness.bench.peak import PEAK_TIMING
from harness.bench.rounds import (
    MAX_ROUNDS,
    Probe,
    choose_reference,
    gemm_headroom,
    roof_probe_task,
    round_medians,
    round_order,
    rounds_for,
    rounds_record,
)
from harness.bench.settings import BenchSettings
from harness.bench.sweeps import PlannedCell
from harness.bench.tasks import (
    clock_for,
    memory_task,
    serve_task,
    timing_task,
    traced_in_timing_worker,
    traced_memory_task,
    warm_up_task,
)
from harness.bench.timing import roof_share
from harness.bench.verdicts import Timed
from harness.reference.tensors import TORCH_DTYPES
from harness.results import Rounds, Stamped
from harness.runtime.isolation import ERROR, OK, Outcome, Task, WorkerPool
from harness.runtime.process_tree import Tree

Pools = Callable[[str], tuple[WorkerPool, WorkerPool]]
"""An implementation's (timing, memory) workers, by its name: its own, kept for the run."""

_PROBE = "roof probe"
"""The roof probe's place in a round's order (:func:`harness.bench.rounds.roof_probe_task`)."""


@dataclass(frozen=True)
class Measured:
    """A cell's outcomes as the parent received them, before any verdict."""

    cell: PlannedCell
    timing: Outcome
    memory: Outcome | None = None
    predicted_s: float | None = None
    seconds: float = 0.0
    """The parent's wall time of the cell's tasks."""
    rounds: Rounds | None = None
    """The cell's rounds when it was timed in rounds: the GEMM read beside it bounds its floor's compute roof."""
    where: Mapping[str, Any] = field(default_factory=dict)
    """Where it ran when not here (a cluster's node, when it held it, the node's load average)."""


@dataclass
class _Contender:
    """One implementation's cell while its case's rounds run."""

    cell: PlannedCell
    predicted: float | None
    seconds: float = 0.0
    """The parent's wall time of its round tasks: what the worker's own account of its time is held against."""
    positions: list[int] = field(default_factory=list)
    failed: Outcome | None = None
    final: Outcome | None = None
    leftovers: tuple[str, ...] = ()
    """Processes its rounds left running (killed after each round): a violation, as for a cell timed alone."""
    drive: Drive | None = None
    """The parent's side of a cell whose calls it drives (:mod:`harness.bench.driven`)."""


class CellTimer:
    """Times planned cells in their implementations' workers; the parent drives the calls of CPU kernel cells."""

    def __init__(self, settings: BenchSettings, sources: Mapping[str, str], backends: Mapping[str, str],
                 listener: Listener | None = None, declared: Mapping[str, Any] | None = None) -> None:
        self.settings, self.sources, self.backends = settings, sources, backends
        self.listener, self.declared = listener, declared or {}
        self._warmed: dict[int, int] = {}
        """id(timing pool) -> :attr:`WorkerPool.starts` when its worker was warmed up (:meth:`warm_up`)."""

    def _clock(self, device: str) -> str:
        return clock_for(self.settings.timing, device)

    def warm_up(self, cell: PlannedCell, timing_pool: WorkerPool) -> None:
        """Once per timing worker, before its first timed task: the worker imports the tasks' module (torch, the
        guard) and the plugin's source. Otherwise the first timed task would pay those imports while its arguments
        are unpickled, before the worker's clock starts: seconds of the parent's wall time the worker's account
        cannot show, read as a slowed clock. A worker started by another task (the ``available=`` check) is not
        warm."""
        if not timing_pool.running or self._warmed.get(id(timing_pool)) != timing_pool.starts:
            source = self.sources[cell.implementation]
            timing_pool.run(Task(cell.key, warm_up_task, (cell.implementation, source)))
            self._warmed[id(timing_pool)] = timing_pool.starts

    def _memory(self, cell: PlannedCell, timing_pool: WorkerPool, memory_pool: WorkerPool) -> Outcome | None:
        """The cell's memory, when the run and the cell measure memory: the one place a cell's memory task is sent,
        whether it was timed alone or in rounds. In its timing worker where tracemalloc reads it (a NumPy kernel,
        :func:`~harness.bench.tasks.traced_in_timing_worker`), else in the implementation's memory worker (only then
        started)."""
        if not (self.settings.memory and cell.memory):
            return None
        args = (cell.implementation, self.sources[cell.implementation], cell.case.to_dict(), cell.mode,
                self.settings.threads)
        if traced_in_timing_worker(self.backends[cell.implementation], cell.case):
            return timing_pool.run(Task(cell.key, traced_memory_task, args))
        return memory_pool.run(Task(cell.key, memory_task, args))

    def alone(self, cell: PlannedCell, predicted_s: float | None, timing_pool: WorkerPool,
              memory_pool: WorkerPool) -> Measured:
        """One cell timed in one task of its timing worker, then its memory measured."""
        started = time.perf_counter()
        settings = self.settings
        args = (cell.implementation, self.sources[cell.implementation], cell.case.to_dict(), cell.mode)
        self.warm_up(cell, timing_pool)
        if self._driven(cell):
            drive = self._drive_for(cell, 1)
            outcome = self._serve(cell, drive, timing_pool, None, None)
            mem = self._memory(cell, timing_pool, memory_pool) if outcome.status == OK else None
            return Measured(cell, outcome, mem, predicted_s, time.perf_counter() - started)
        # a module's calls run on the module cells' own loop; a CUDA cell's on its events; checks off: plain calls
        outcome = timing_pool.run(Task(cell.key, timing_task, args + (settings.timing, settings.threads),
                                       end_leftovers=True))
        mem = self._memory(cell, timing_pool, memory_pool) if outcome.status == OK else None
        return Measured(cell, outcome, mem, predicted_s, time.perf_counter() - started)

    def rounds(self, admitted: list[tuple[PlannedCell, float | None]], pools_of: Pools,
               peak_pool: WorkerPool) -> list[Measured]:
        """The admitted cells of one case timed in shuffled rounds with the roof probe among them; each
        cell with its :class:`~harness.results.Rounds` record."""
        settings, first = self.settings, admitted[0][0]
        for cell, _ in admitted:
            self.warm_up(cell, pools_of(cell.implementation)[0])
        states = {cell.implementation: _Contender(cell, predicted) for cell, predicted in admitted}
        probe = Probe()
        # the probe opens each round and the contenders follow back to back, shuffled: the calls a round's ratio
        # pairs are a pipe round trip apart, not a probe's tens of milliseconds (a load switching within a second
        # then hits both sides of the pair alike)
        orders = round_order(list(states), max(settings.timing.rounds, MAX_ROUNDS), f"{first.case.id}/{first.mode}")
        probe_args = (first.case.dtype, first.case.device, settings.threads, self._clock(first.case.device),
                      roof_share(PEAK_TIMING, first.case.device, settings.timing.roof_budget_s))
        total = settings.timing.rounds
        first_calls: list[float] = []  # each contender's fastest call of the first round
        for index, order in enumerate(orders):
            if index == total:
                break
            reading = peak_pool.run(Task(_PROBE, roof_probe_task, probe_args))
            if reading.status == OK:
                probe.gemm_gflops.append(reading.value[0])
                probe.read_gbps.append(reading.value[1])
                if reading.value[2]:
                    probe.thread_gflops.append(reading.value[2])
            for position, name in enumerate(order):
                state = states[name]
                if state.failed is None:
                    self._round(first, state, (position, index, total), pools_of(name)[0], first_calls)
            if index == 0 and settings.timing.rounds > 1:  # fast contenders: more, shorter rounds
                total = rounds_for(settings.timing.budget_s, first_calls, settings.timing.rounds)
        reference = choose_reference(list(s for s, v in states.items() if v.failed is None and v.final is not None),
                                     settings.reference)
        return self._rounds_measured(states, probe, reference, pools_of)

    # ------------------------------------------------------------------ calls the parent drives

    def _driven(self, cell: PlannedCell) -> bool:
        """A CPU kernel forward with the checks on: the parent drives its calls (:mod:`harness.bench.driven`)."""
        return (self.listener is not None and cell.case.device == "cpu" and cell.case.kind == "kernel"
                and self.settings.timing.checks and cell.implementation in self.declared)

    def _drive_for(self, cell: PlannedCell, rounds: int) -> Drive:
        """The parent's side of a cell: its own draw of the cell's input sets (the worker draws the same), the
        arrays it redraws before every call, on the cell's clock."""
        from harness.bench import audit
        from harness.bench.fresh import fresh_for

        impl, case, timing = self.declared[cell.implementation], cell.case, self.settings.timing
        shift = audit.fresh_each_call(timing.warm_cache, cell.mode)
        with audit.one_thread():
            drawn = audit.draw_sets(case, audit.set_count(case, timing.warm_cache), impl.declared.backend)
        sets = []
        for index, inputs in enumerate(drawn):
            arrays = inputs.arrays(impl.declared.structures)
            named = [("q", arrays[0]), ("k", arrays[1]), ("v", arrays[2])]
            parent = ParentSet(inputs, fresh_for(named, inputs) if shift else None, named)
            if cell.mode != "fwd":  # the upstream gradient the worker draws for the set: the same seed, the same draw
                q, v = arrays[0], arrays[2]
                parent.leaves = (q, arrays[1], v)
                gen = torch.Generator().manual_seed(index + 1)
                parent.grad_out = torch.randn((*q.shape[:-1], v.shape[-1]), generator=gen,
                                              dtype=torch.float32).to(TORCH_DTYPES[case.dtype])
            sets.append(parent)
        return Drive(sets, timing, self._clock(case.device), profile=impl.declared.backend == "torch", rounds=rounds)

    def _serve(self, cell: PlannedCell, drive: Drive, timing_pool: WorkerPool, key: str | None,
               rounds: int | None) -> Outcome:
        """One task of ``cell``'s worker serving the calls the parent drives: one round of ``drive`` (all of it for a
        cell timed alone); after its last round the outcome carries the cell's :class:`Timed`, measured here."""
        settings = self.settings
        args = (cell.implementation, self.sources[cell.implementation], cell.case.to_dict(), cell.mode, settings.timing,
                settings.threads, self.listener.ticket() if self.listener is not None else None, key)

        def work(conn: Any, worker: Tree) -> bool:
            drive.attach(conn)
            drive.round(conn, worker, rounds)
            return drive.done

        assert self.listener is not None
        with driving(self.listener, lambda: timing_pool.pid, work) as served:
            outcome = timing_pool.run(Task(cell.key, serve_task, args, end_leftovers=True))
        if served["error"] is not None and (outcome.status == OK or outcome.status == ERROR and served["refused"]):
            worker = "" if outcome.status == OK else f" (the worker: {outcome.error})"
            outcome = Outcome(ERROR, error=f"the calls could not be served: {served['error']}{worker}",
                              seconds=outcome.seconds, leftovers=outcome.leftovers)
        if outcome.status == OK and drive.done:
            set_up = bool(getattr(self.declared.get(cell.implementation), "set_up", False))
            outcome.value = measured_by_parent(drive, outcome.value, cell.case, cell.mode, set_up)
        if outcome.status != OK or drive.done:
            drive.close()
        return outcome

    def _round(self, first: PlannedCell, state: _Contender, at: tuple[int, int, int], timing_pool: WorkerPool,
               first_calls: list[float]) -> None:
        """One contender's turn in a round of ``first``'s case: ``at`` is (its position in the round, the round's
        index, the rounds in all); its outcome is folded into its state."""
        settings, (position, index, total) = self.settings, at
        key = f"{first.case.id}/{first.mode}/{state.cell.implementation}"
        if state.drive is None:
            state.drive = self._drive_for(state.cell, settings.timing.rounds)
        outcome = self._serve(state.cell, state.drive, timing_pool, key, None if index == 0 else total)
        state.seconds += outcome.seconds
        state.leftovers += outcome.leftovers
        state.positions.append(position)
        if outcome.status != OK:
            state.failed = outcome
        elif state.drive.done:
            state.final = outcome
        elif index == 0 and state.drive.samples:
            first_calls.append(min(state.drive.samples))

    def _rounds_measured(self, states: dict[str, _Contender], probe: Probe, reference: str | None,
                         pools_of: Pools) -> list[Measured]:
        """Each contender's :class:`Measured`: its last round's outcome with the parent's stamps, its memory, and
        its rounds record (its medians against the reference's, the roofs the probe read)."""
        stamped = {n: s.final.value for n, s in states.items() if s.failed is None and s.final is not None}
        medians = {n: round_medians(t.samples_s, t.round_sizes or ()) for n, t in stamped.items()}
        out = []
        for name, state in states.items():
            cell = state.cell
            if state.failed is not None or state.final is None:
                failed = state.failed or Outcome("error", error="no last round answered")
                out.append(Measured(cell, failed, None, state.predicted, state.seconds))
                continue
            mem = self._memory(cell, *pools_of(name))
            seconds = state.seconds + (mem.seconds if mem is not None else 0.0)
            final = Outcome(OK, value=stamped[name], seconds=state.seconds, leftovers=state.leftovers)
            sizes = state.final.value.round_sizes or ()
            record = rounds_record(medians[name], sizes, state.positions, len(states), reference,
                                   None if reference in (None, name) else medians[reference], probe,
                                   gemm_headroom(cell.case.dtype, cell.case.device))
            out.append(Measured(cell, final, mem, state.predicted, seconds, rounds=record))
        return out


SET_UP_HINT = ("prepare=True: set-up sees a first set of values; every timed call gets new values written into the "
               "same q, k and v, so work on their values (a copy, a transpose, a scaling) belongs in the call")
"""Said beside the mismatches of an implementation with its own set-up: the likely cause when its output is stale."""


def measured_by_parent(drive: Drive, served: Any, case: Any, mode: str, set_up: bool = False) -> Any:
    """The cell's :class:`~harness.bench.verdicts.Timed` as the parent measured it: the samples on its clock, the
    calls it drew checked against float64 on the values it wrote (:func:`harness.bench.audit.check_kept`), and what
    the worker said of the inputs that are not redrawn (a second opinion, as it comes from the plugin's process)."""
    from harness.bench import audit
    from harness.bench.guard import InputSet
    from harness.results import Integrity

    kept = drive.kept()
    sets = [InputSet(call=_never, named=s.named, inputs=s.inputs, fresh=s.fresh, leaves=s.leaves, grad_out=s.grad_out)
            for s in drive.sets]
    outputs = audit.check_kept(kept, sets, case, mode)
    worker = served.integrity.kept_problems if served is not None and served.integrity is not None else ()
    problems = tuple(f"timed sample {k.index} (input set {k.set_index}): {k.problem}" for k in kept if k.problem)
    problems += tuple(worker or ()) + ((drive.problem,) if drive.problem else ())
    samples = drive.samples
    integrity = Integrity(
        input_sets=len(drive.sets), shifted=any(s.fresh is not None for s in drive.sets), untyped=tuple(drive.untyped),
        kept_problems=problems, checked=tuple(outputs.checked),
        output_problems=tuple(outputs.problems) + ((SET_UP_HINT,) if set_up and outputs.problems else ()),
        stamps=Stamped(calls=len(samples), clock=drive.clock, median_s=statistics.median(samples) if samples else None,
                       total_s=sum(samples), latency_s=statistics.median(drive.nulls) if drive.nulls else None),
    )
    return Timed(samples_s=tuple(samples), threads=getattr(served, "threads", None),
                 setup_s=getattr(served, "setup_s", None), integrity=integrity, profile=getattr(served, "profile", None),
                 round_sizes=tuple(drive.round_sizes) if drive.rounds > 1 else None)


def _never() -> Any:
    raise RuntimeError("the parent never runs an implementation's call")
