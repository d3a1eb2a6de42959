"""Run a bench plan: every cell timed in a worker, its memory measured in another, written as it comes.

Worker pools, used one at a time (two cores: a measure must never compete with another): a
peak worker that runs only the GEMM peak (no plugin code ever runs there), and per
implementation a fresh timing worker for the timed calls and a memory worker, whose
allocator is set up for exact RSS accounting (:mod:`harness.bench.memory`), runs the separate
memory measures. Each task has a timeout; a crash, a hang or an exception costs its cell
only, and is recorded as such. Every cell is written to the result file the moment it is
known, so an interrupted run leaves a valid file that ``--resume`` finishes.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from harness.analysis.stats import summarize
from harness.availability import unsupported
from harness.bench import guard  # binds the clocks: imported by a worker before any plugin is
from harness.bench.bandwidth import BANDWIDTH_TIMING, measure_bandwidth
from harness.bench.module_cells import case_of, module_memory_task, module_timing_task
from harness.bench.peak import PEAK_TIMING, measure_gemm_peak, peak_key
from harness.bench.roofs import cpu_roofs, physics_floor
from harness.bench.settings import BenchSettings as BenchSettings  # its home before settings.py
from harness.bench.sweeps import Budget, PlannedCell
from harness.bench.timekeeper import null_and_calls
from harness.bench.timing import TimingConfig, freeze_imports, pin_threads, thread_environment, time_call
from harness.bench.verdicts import Timed
from harness.cases import AttentionCase
from harness.discovery import Registry, load_implementation
from harness.flops import attention_flops, compulsory_bytes
from harness.isolation import OK, Outcome, Task, WorkerPool, memory_cap
from harness.results import (
    Accounting,
    Bandwidth,
    BenchCell,
    CellKey,
    Integrity,
    Memory,
    Node,
    Peak,
    ResultWriter,
    Stamped,
    Status,
    bandwidth_key,
)

# ---------------------------------------------------------------- worker side

def _implementation(name: str, source: str) -> Any:
    """Implementation ``name`` from the one source that declares it: no other plugin is imported here."""
    return load_implementation(source, name)


def build_call(impl: Any, case: AttentionCase, mode: str, seed: int = 0) -> Callable[[], Any]:
    """The zero-argument call to time, with every bit of set-up (inputs, layout, graph) done here
    (:func:`harness.bench.audit.build_set` describes each mode)."""
    from harness.bench.audit import build_set
    from harness.tensors import make_inputs

    return build_set(impl, case, mode, make_inputs(case, seed, impl.backend), seed, shift=False).call


def warm_up_task(name: str, source: str) -> None:
    """Worker: load the implementation's source and the implementation's own set-up (its availability check may build a
    C++ extension, on a cluster node for the first time) before any cell's time limit runs."""
    _implementation(name, source).availability()
    freeze_imports()  # each round's collection then scans the cells' objects, not torch's


def timing_task(name: str, source: str, case: dict[str, object], mode: str,
                config: TimingConfig, threads: int | None, ticket: tuple[str, bytes, str] | None = None) -> Timed:
    """Worker: time one cell; raw samples, the thread count in force, and what backs the time
    (docs/integrity.md): input sets rotated, kept calls checked, one call profiled, the clock's accounting."""
    from harness.bench import audit

    entered = guard.CLOCK()
    if case.get("kind") == "module":
        return module_timing_task(_implementation(name, source), case, config, threads)
    used = pin_threads(threads)
    impl = _implementation(name, source)
    attention_case = AttentionCase.from_dict(case)
    started = guard.CLOCK()
    if not config.checks:
        call = build_call(impl, attention_case, mode)
        setup_s = guard.CLOCK() - started
        return Timed(samples_s=tuple(time_call(call, attention_case.device, config)), threads=used, setup_s=setup_s)
    shift = not getattr(impl, "set_up", False) and not config.warm_cache and mode != "bwd"
    with audit.one_thread():
        drawn = audit.draw_sets(attention_case, audit.set_count(attention_case, config.warm_cache), impl.backend)
    sets = [audit.build_set(impl, attention_case, mode, inputs, seed, shift) for seed, inputs in enumerate(drawn)]
    setup_s = guard.CLOCK() - started  # inputs and the implementation's set-up (a compile, say)
    looped = guard.CLOCK()
    if attention_case.device == "cuda":  # docs/integrity.md: which checks a CUDA cell gets
        loop = guard.cuda_loop(sets, config, impl.backend)
    else:
        from harness.bench import timekeeper

        stamp = timekeeper.connect(ticket)  # the parent's clock on every call
        loop = guard.timed_loop(sets, config, impl.backend, audit.profile_call if impl.backend == "torch" else None,
                                sample_clock=guard.CPU_CLOCK if config.clock == "cpu" else None, stamp=stamp)
        timekeeper.flush(stamp)
    loop_total = guard.CLOCK() - looped
    checked = guard.CLOCK()
    outputs = audit.check_kept(loop.kept, sets, attention_case, mode)
    written = tuple(audit.input_problems(sets))  # a call that writes into its inputs: a violation, as in verify
    profile = loop.profile
    spin = guard.spin_baseline() if loop.kept else 0.0
    checks_s = guard.CLOCK() - checked
    total = guard.CLOCK() - entered
    integrity = Integrity(
        input_sets=len(sets), shifted=shift, clock=guard.clock_problem(), untyped=tuple(loop.untyped),
        kept_problems=tuple(f"timed sample {k.index} (input set {k.set_index}): {k.problem}" for k in loop.kept if k.problem)
        + written,
        output_problems=tuple(outputs.problems), checked=tuple(outputs.checked),
        cpu_after_s=tuple(k.cpu_after_s for k in loop.kept if k.cpu_after_s is not None), spin_s=spin,
        accounting=Accounting(total_s=total, loop_s=loop.loop_s, captures_s=loop.captures_s,
                              phases_s=(started - entered) + setup_s + loop_total + checks_s, checks_s=checks_s),
    )
    return Timed(samples_s=tuple(loop.samples), threads=used, setup_s=setup_s, integrity=integrity,
                 profile=None if profile is None else tuple((str(n), float(s)) for n, s in profile))


def memory_task(name: str, source: str, case: dict[str, object], mode: str,
                threads: int | None) -> Memory:
    """Worker (the memory one): peak extra bytes of one call."""
    from harness.bench.memory import measure, prepare_process

    if case.get("kind") == "module":
        return module_memory_task(_implementation(name, source), case, threads)
    prepare_process()
    pin_threads(threads)
    impl = _implementation(name, source)
    attention_case = AttentionCase.from_dict(case)
    call = build_call(impl, attention_case, mode)
    return measure(call, impl.backend, attention_case.device)


def traced_memory_task(name: str, source: str, case: dict[str, object], mode: str, threads: int | None) -> Memory:
    """Worker (the implementation's timing one): peak extra bytes of one call of a NumPy kernel on the CPU, by
    tracemalloc, which reads the arrays' own allocations whatever the allocator does: it needs none of the memory
    worker's set-up, so a NumPy implementation is measured where it is timed, after its timed calls, and no process
    is started for it. tracemalloc is stopped when the measure ends: the timed calls after it run untraced."""
    from harness.bench.memory import measure_numpy

    pin_threads(threads)
    impl = _implementation(name, source)
    return measure_numpy(build_call(impl, AttentionCase.from_dict(case), mode))


def traced_in_timing_worker(backend: str, case: AttentionCase) -> bool:
    """Whether a cell's memory is measured in its timing worker (:func:`traced_memory_task`): a NumPy kernel on the
    CPU. Others need the memory worker's allocator set-up (torch's CPU bytes are read from the RSS)."""
    return backend == "numpy" and case.device == "cpu" and case.kind == "kernel"


def peak_task(dtype: str, device: str, threads: int | None, clock: str = "wall") -> Peak:
    """Worker (the peak one): the GEMM peak, its calls timed on the cells' clock (a roof read on the wall clock
    under load would sit below cells timed on CPU time)."""
    return measure_gemm_peak(dtype, device, replace(PEAK_TIMING, clock=clock), threads=threads)


def bandwidth_task(device: str, threads: int | None, clock: str = "wall") -> Bandwidth:
    """Worker (the peak one): the read and copy bandwidth, timed on the cells' clock."""
    return measure_bandwidth(device, replace(BANDWIDTH_TIMING, clock=clock), threads=threads)


# ---------------------------------------------------------------- parent side


_PROBE = "roof probe"
"""The roof probe's place in a round's order (:func:`harness.bench.rounds.roof_probe_task`)."""


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
    spans: list[float] = field(default_factory=list)
    """The parent's stamps of its timed calls (:mod:`harness.bench.timekeeper`), latency taken off."""
    latency: list[float] = field(default_factory=list)


def case_groups(cells: list[PlannedCell]) -> list[list[PlannedCell]]:
    """The cells grouped by (case, mode), smallest work first; within a group in the plan's order."""
    ordered = sorted(cells, key=lambda c: (attention_flops(c.case, c.mode), c.case.id, c.mode))
    return [list(group) for _, group in itertools.groupby(ordered, key=lambda c: (c.case.id, c.mode))]


def skipped_cell(cell: PlannedCell, reason: str) -> BenchCell:
    return _cell(cell, Status.SKIPPED, reason)


def _cell(cell: PlannedCell, status: Status, reason: str | None, **measured: Any) -> BenchCell:
    node: Node | None = measured.get("node")
    kind = None if node is None else node.kind  # on a cluster: the peak of the node's kind
    return BenchCell(implementation=cell.implementation, case=cell.case.to_dict(), case_id=cell.case.id,
                     mode=cell.mode, status=status, reason=reason, flops=attention_flops(cell.case, cell.mode),
                     peak_key=peak_key(cell.case.dtype, cell.case.device, kind),
                     bytes=float(compulsory_bytes(cell.case, cell.mode)), **measured)


def _failed(outcome: Outcome) -> str:
    return f"{outcome.status}: {outcome.error}"


class BenchRunner:
    """Measures planned cells into a :class:`ResultWriter`; ``on_cell`` sees each finished cell."""

    def __init__(self, settings: BenchSettings, writer: ResultWriter, registry: Registry,
                 on_cell: Callable[[BenchCell], None] = lambda cell: None) -> None:
        self.settings = settings
        self.writer = writer
        self.registry = registry
        self.on_cell = on_cell
        self.budget = Budget(settings.memory_budget_bytes or 0.0, settings.cell_budget_s,
                             settings.timing.min_samples, settings.timing.warmup_s)
        self.beside: tuple[float | None, float | None] = (None, None)
        """The GEMM read beside the cell being judged and the CPU's headroom over it (:func:`physics_floor`)."""
        self.keeper: Any = None
        """The parent's clock on every timed call in rounds (:class:`~harness.bench.timekeeper.Timekeeper`)."""
        self.roofs = cpu_roofs()
        """This machine's theoretical roofs (:mod:`harness.bench.roofs`): the physics floor of local cells."""
        self._warmed: dict[int, int] = {}
        """id(timing pool) -> :attr:`WorkerPool.starts` when its worker was warmed up (:meth:`_warm_up`)."""

    def _clock(self, device: str) -> str:
        """The clock a cell of ``device`` is timed, stamped and has its roofs read on: the cells' own (a GPU's: always
        the wall clock)."""
        return self.settings.timing.clock if device == "cpu" else "wall"

    def learn_from_done(self) -> set[CellKey]:
        """Feed the budget with the cells already in the file (a resumed run); return their keys."""
        for done_cell in self.writer.cells:  # a resumed run predicts from what it measured before
            if isinstance(done_cell, BenchCell) and done_cell.status == Status.OK and done_cell.median:
                planned = PlannedCell(done_cell.implementation, case_of(done_cell.case), done_cell.mode)
                self.budget.record(planned, done_cell.median, done_cell.peak_extra_bytes)
        return self.writer.done_keys()

    def run(self, todo: list[PlannedCell]) -> None:
        """Measure ``todo``: the cells left (the session drops those the file already holds, once)."""
        self.learn_from_done()
        from harness.bench.timekeeper import Timekeeper

        with thread_environment(self.settings.threads), WorkerPool(timeout=self.settings.timeout_s) as peak_pool, \
                contextlib.ExitStack() as stack:
            self.keeper = Timekeeper()
            stack.callback(self.keeper.close)
            pools: dict[str, tuple[WorkerPool, WorkerPool]] = {}
            # past it an allocation fails, said as such: the budget a call may take, plus the input sets a cell holds
            cap = memory_cap((self.settings.memory_budget_bytes or 0.0) + guard.SETS_BYTES)

            def pools_of(name: str) -> tuple[WorkerPool, WorkerPool]:
                # Workers of its own per implementation, kept for the run: a plugin that changes process state
                # (torch's default dtype, NumPy's error mode, thread counts) must not change what another sees.
                if name not in pools:
                    pools[name] = (stack.enter_context(WorkerPool(timeout=self.settings.timeout_s, memory_limit=cap)),
                                   stack.enter_context(WorkerPool(timeout=self.settings.timeout_s, memory_limit=cap)))
                return pools[name]

            for group in case_groups(todo):  # smallest work first: the budget's predictions have history
                self._measure_case(group, pools_of, peak_pool)
            self._confirm_peaks(peak_pool)

    def _measure_case(self, group: list[PlannedCell], pools_of: Callable[[str], tuple[WorkerPool, WorkerPool]],
                      peak_pool: WorkerPool) -> None:
        """Every implementation's cell of one (case, mode): in rounds (:mod:`harness.bench.rounds`) on a CPU
        with the checks on, else one after another."""
        admitted: list[tuple[PlannedCell, float | None]] = []
        for cell in group:
            verdict = self._admit(cell, pools_of(cell.implementation)[0], peak_pool)
            if isinstance(verdict, BenchCell):
                self._finish(verdict)
            else:
                admitted.append((cell, verdict))
        if not admitted:
            return
        timing = self.settings.timing
        kernels = all(self.registry.get(cell.implementation).kind == "kernel" for cell, _ in admitted)
        if timing.rounds > 1 and timing.checks and admitted[0][0].case.device == "cpu" and kernels:  # a module's
            # calls are the layers' (harness.bench.module_cells), timed alone on their own loop
            for measured_cell in self._rounds(admitted, pools_of, peak_pool):
                self._finish(measured_cell)
            return
        for cell, predicted_s in admitted:
            self._finish(self._time_alone(cell, predicted_s, *pools_of(cell.implementation)))

    def _confirm_peaks(self, pool: WorkerPool) -> None:
        """Measure each peak again after the cells and keep the higher, in the run's peaks record.

        A transient slowdown (frequency scaling, a neighbour on the cores) only ever lowers a
        GEMM's rate, so one low reading at the start would inflate every cell's % of peak. Cells
        are not touched: their % of peak is computed on reading, from this record.
        """
        peaks = dict(self.writer.run.peaks)
        for key, peak in peaks.items():
            if not peak.gflops or peak.confirmed_gflops is not None:
                continue
            dtype, device = key.split("/")
            outcome = pool.run(Task(key, peak_task, (dtype, device, self.settings.threads, self._clock(device))))
            reading: Peak | None = outcome.value if outcome.status == OK else None
            peaks[key] = confirmed(peak, reading)
        self.writer.set("peaks", peaks)
        self._confirm_bandwidth(pool)

    def _confirm_bandwidth(self, pool: WorkerPool) -> None:
        """As for the peaks: measure the bandwidth again after the cells and keep the higher reading."""
        records = dict(self.writer.run.bandwidth or {})
        for key, record in records.items():
            if not record.read_gbps or record.confirmed_read_gbps is not None:
                continue
            outcome = pool.run(Task(key, bandwidth_task, (key.split("/")[0], self.settings.threads,
                                                         self._clock(key.split("/")[0]))))
            if outcome.status != OK:
                continue
            records[key] = record.higher(outcome.value, confirm=True)
        if records:
            self.writer.set("bandwidth", records)

    def _bandwidth(self, device: str, pool: WorkerPool) -> None:
        """Measure the memory bandwidth once per run (device and thread count), before the first cell."""
        key = bandwidth_key(device, self.settings.threads)
        records = dict(self.writer.run.bandwidth or {})
        if key in records:
            return
        outcome = pool.run(Task(key, bandwidth_task, (device, self.settings.threads, self._clock(device))))
        records[key] = outcome.value if outcome.status == OK else Bandwidth(error=_failed(outcome))
        self.writer.set("bandwidth", records)

    def _finish(self, cell: BenchCell) -> None:
        self.writer.add(cell)
        self.on_cell(cell)

    def _peak(self, dtype: str, device: str, pool: WorkerPool) -> float | None:
        key = peak_key(dtype, device)
        peaks = self.writer.run.peaks
        if key not in peaks:
            outcome = pool.run(Task(key, peak_task, (dtype, device, self.settings.threads, self._clock(device))))
            measured = outcome.value if outcome.status == OK else Peak(error=_failed(outcome))
            peaks = {**peaks, key: measured}
            self.writer.set("peaks", peaks)
        return peaks[key].gflops

    def _admit(self, cell: PlannedCell, timing_pool: WorkerPool, peak_pool: WorkerPool) -> BenchCell | float | None:
        """The cell skipped (unsupported, over budget), or its predicted seconds (None: no prediction). Its
        ``available=`` check runs in the implementation's timing worker, never here."""
        impl = self.registry.get(cell.implementation)
        source = self.registry.sources[cell.implementation]
        reasons = unsupported(impl, cell.case.with_(grad=cell.mode != "fwd"), source, timing_pool)  # in the worker
        if isinstance(reasons, Outcome):  # its available= check crashed or hung: the cell's own outcome
            return _cell(cell, Status(reasons.status), reasons.error, seconds=reasons.seconds)
        if reasons:
            return skipped_cell(cell, "; ".join(reasons))
        peak = self._peak(cell.case.dtype, cell.case.device, peak_pool)
        self._bandwidth(cell.case.device, peak_pool)
        over = self.budget.check(cell, peak)
        if over:
            return skipped_cell(cell, over)
        return self.budget.cell_seconds_predicted(cell, peak)

    def _time_alone(self, cell: PlannedCell, predicted_s: float | None, timing_pool: WorkerPool,
                    memory_pool: WorkerPool) -> BenchCell:
        started = time.perf_counter()
        args = (cell.implementation, self.registry.sources[cell.implementation], cell.case.to_dict(), cell.mode)
        self._warm_up(cell, timing_pool)
        stamped = cell.case.device == "cpu" and cell.case.kind == "kernel" and self.settings.timing.checks \
            and self.keeper is not None  # a module's calls run on the module cells' own loop, unstamped
        ticket = self.keeper.ticket_for(self._clock(cell.case.device)) if stamped else None
        if stamped:
            self.keeper.clear()  # nothing left over from another task
        outcome = timing_pool.run(Task(cell.key, timing_task, args + (self.settings.timing, self.settings.threads,
                                                                      ticket), end_leftovers=True))
        if stamped and outcome.status == OK and isinstance(outcome.value, Timed):
            clock = self._clock(cell.case.device)
            latency, spans = null_and_calls(self.keeper.take(), clock)
            outcome.value = _stamped(outcome.value, _Contender(cell, predicted_s, spans=spans, latency=[latency]),
                                     clock)
        mem = None
        if outcome.status == OK and self.settings.memory and cell.memory:
            mem = self._memory(cell, args + (self.settings.threads,), timing_pool, memory_pool)
        return self.measured(cell, outcome, mem, predicted_s, time.perf_counter() - started)

    def _memory(self, cell: PlannedCell, args: tuple[Any, ...], timing_pool: WorkerPool,
                memory_pool: WorkerPool) -> Outcome:
        """The cell's memory measure: in its timing worker where tracemalloc reads it (a NumPy kernel), else in the
        implementation's memory worker (only then started)."""
        if traced_in_timing_worker(self.registry.get(cell.implementation).backend, cell.case):
            return timing_pool.run(Task(cell.key, traced_memory_task, args))
        return memory_pool.run(Task(cell.key, memory_task, args))

    def _warm_up(self, cell: PlannedCell, timing_pool: WorkerPool) -> None:
        """Once per timing worker, before its first timed task: the worker imports this module (torch, the guard)
        and the plugin's source. Otherwise the first timed task would pay those imports while its arguments are
        unpickled, before the worker's clock starts: seconds of the parent's wall time the worker's account cannot
        show, read as a slowed clock. A worker started by another task (the ``available=`` check) is not warm."""
        if not timing_pool.running or self._warmed.get(id(timing_pool)) != timing_pool.starts:
            source = self.registry.sources[cell.implementation]
            timing_pool.run(Task(cell.key, warm_up_task, (cell.implementation, source)))
            self._warmed[id(timing_pool)] = timing_pool.starts

    def _rounds(self, admitted: list[tuple[PlannedCell, float | None]],
                pools_of: Callable[[str], tuple[WorkerPool, WorkerPool]], peak_pool: WorkerPool) -> list[BenchCell]:
        """The admitted cells of one case timed in shuffled rounds with the roof probe among them; each
        cell with its :class:`~harness.results.Rounds` record."""
        from harness.bench.rounds import (
            MAX_ROUNDS,
            Probe,
            choose_reference,
            roof_probe_task,
            round_order,
            round_task,
            rounds_for,
        )
        from harness.bench.timekeeper import null_and_calls

        settings, first = self.settings, admitted[0][0]
        for cell, _ in admitted:
            self._warm_up(cell, pools_of(cell.implementation)[0])
        states = {cell.implementation: _Contender(cell, predicted) for cell, predicted in admitted}
        probe = Probe()
        # the probe opens each round and the contenders follow back to back, shuffled: the calls a round's ratio
        # pairs are a pipe round trip apart, not a probe's tens of milliseconds (a load switching within a second
        # then hits both sides of the pair alike)
        orders = round_order(list(states), max(settings.timing.rounds, MAX_ROUNDS), f"{first.case.id}/{first.mode}")
        probe_args = (first.case.dtype, first.case.device, settings.threads, self._clock(first.case.device))
        total, first_calls = settings.timing.rounds, []
        for index, order in enumerate(orders):
            if index == total:
                break
            reading = peak_pool.run(Task(_PROBE, roof_probe_task, probe_args))
            if reading.status == OK:
                probe.gemm_gflops.append(reading.value[0])
                probe.read_gbps.append(reading.value[1])
            for position, name in enumerate(order):
                state = states[name]
                if state.failed is not None:
                    continue
                key = f"{first.case.id}/{first.mode}/{name}"
                args = (key, name, self.registry.sources[name], first.case.to_dict(), first.mode, settings.timing,
                        settings.threads, None if index == 0 else total,
                        self.keeper.ticket_for(self._clock(first.case.device)))
                self.keeper.clear()  # nothing left over from another task
                outcome = pools_of(name)[0].run(Task(state.cell.key, round_task, args, end_leftovers=True))
                if outcome.status == OK:
                    latency, spans = null_and_calls(self.keeper.take(), self._clock(first.case.device))
                    state.spans += spans
                    state.latency.append(latency)
                state.seconds += outcome.seconds
                state.leftovers += outcome.leftovers
                state.positions.append(position)
                if outcome.status != OK:
                    state.failed = outcome
                elif outcome.value.integrity is not None:  # the last round: every sample and the checks
                    state.final = outcome
                elif index == 0 and outcome.value.samples_s:
                    first_calls.append(min(outcome.value.samples_s))
            if index == 0 and settings.timing.rounds > 1:  # fast contenders: more, shorter rounds
                total = rounds_for(settings.timing.budget_s, first_calls, settings.timing.rounds)
        return self._rounds_measured(states, probe, choose_reference(list(s for s, v in states.items()
            if v.failed is None and v.final is not None), self.settings.reference), pools_of)

    def _rounds_measured(self, states: dict[str, _Contender], probe: Any, reference: str | None,
                         pools_of: Callable[[str], tuple[WorkerPool, WorkerPool]]) -> list[BenchCell]:
        from harness.bench.rounds import gemm_headroom, round_medians, rounds_record

        timed = {n: s for n, s in states.items() if s.failed is None and s.final is not None}
        medians = {n: round_medians(s.final.value.samples_s, s.final.value.round_sizes or ()) for n, s in timed.items()
                   if s.final is not None}
        out = []
        for name, state in states.items():
            cell = state.cell
            if state.failed is not None or state.final is None:
                failed = state.failed or Outcome("error", error="no last round answered")
                out.append(self.measured(cell, failed, None, state.predicted, state.seconds))
                continue
            mem, seconds = None, state.seconds
            if self.settings.memory and cell.memory:
                source = self.registry.sources[name]
                args = (name, source, cell.case.to_dict(), cell.mode, self.settings.threads)
                mem = self._memory(cell, args, *pools_of(name))
                seconds += mem.seconds
            final = Outcome(OK, value=_stamped(state.final.value, state, self._clock(cell.case.device)),
                            seconds=state.seconds, leftovers=state.leftovers)
            sizes = state.final.value.round_sizes or ()
            record = rounds_record(medians[name], sizes, state.positions, len(states), reference,
                                   None if reference in (None, name) else medians[reference], probe,
                                   gemm_headroom(cell.case.dtype, cell.case.device))
            self.beside = (record.gemm_gflops, record.gemm_headroom)  # the floor's compute roof, read beside the cell
            try:
                measured_cell = self.measured(cell, final, mem, state.predicted, seconds)
            finally:
                self.beside = (None, None)
            out.append(replace(measured_cell, rounds=record))
        return out

    def measured(self, cell: PlannedCell, timing: Outcome, mem: Outcome | None, predicted_s: float | None,
                 seconds: float, **where: Any) -> BenchCell:
        """The cell from its timing and memory outcomes (here or on a node, ``where`` it ran); feeds the budget."""
        if timing.status != OK:
            return _cell(cell, Status(timing.status), timing.error, traceback=timing.traceback, seconds=seconds, **where)
        timed: Timed = timing.value
        stats = summarize(timed.samples_s)
        median = stats.median or 0.0  # summarize fills it
        memory = None
        if mem is not None:
            memory = mem.value if mem.status == OK else Memory(error=_failed(mem))
        where = {"load_average": _load_average(), **where}  # a node's own load average when it sent one
        result = _cell(cell, Status.OK, None, samples_s=timed.samples_s, stats=stats, threads=timed.threads,
                       memory=memory, predicted_seconds=predicted_s, setup_s=timed.setup_s,
                       profile=timed.profile, **where)
        result = replace(result, gflops=(result.flops or 0.0) / median / 1e9, seconds=seconds)
        if timed.integrity is not None:
            result = self._judged(result, timing.value, timing.seconds)
        if timing.leftovers:  # a process the call started ran on beside the timing (killed now)
            result = leftover_violation(result, timing.leftovers)
        if result.status == Status.OK:
            self.budget.record(cell, median, result.peak_extra_bytes)
        return result

    def _judged(self, cell: BenchCell, timed: Timed, wall_s: float | None) -> BenchCell:
        """The cell held against the physics floor and its worker's checks (:mod:`harness.bench.verdicts`)."""
        from harness.bench.verdicts import judge

        case = cell.case
        device = str(case.get("device", "cpu"))
        kind = None if cell.node is None else cell.node.kind
        bandwidth = (self.writer.run.bandwidth or {}).get(bandwidth_key(device, cell.threads, kind))
        floor = physics_floor(cell.flops or 0.0, cell.bytes or 0.0, str(case.get("dtype")), device,
                              self.writer.run.peaks.get(cell.peak_key or ""), bandwidth,
                              None if cell.node else self.roofs, *self.beside)  # a node's own CPUs are not this machine's
        status, reason = judge(timed, wall_s, floor)
        integrity = replace(timed.integrity or Integrity(), floor=floor, wall_s=wall_s)
        return replace(cell, status=status, reason=reason, integrity=integrity)


def _stamped(timed: Timed, state: _Contender, clock: str = "wall") -> Timed:
    """``timed`` with the parent's stamps of its calls (on ``clock``) in its integrity record."""
    import statistics

    if timed.integrity is None:
        return timed
    spans = state.spans
    record = Stamped(calls=len(spans), clock=clock, median_s=statistics.median(spans) if spans else None, total_s=sum(spans),
                     latency_s=statistics.median(state.latency) if state.latency else None)
    return replace(timed, integrity=replace(timed.integrity, stamps=record))


def leftover_violation(cell: BenchCell, leftovers: tuple[str, ...]) -> BenchCell:
    """``cell`` as a violation: its calls left processes running (work outside the timed calls, and
    processes that would outlive the run); they were killed when the task returned."""
    said = f"{len(leftovers)} process(es) the calls started were still running after the task: " \
           f"{', '.join(leftovers[:5])}{' ...' if len(leftovers) > 5 else ''} (killed; a call must not leave " \
           "processes behind)"
    reason = said if cell.status == Status.OK or not cell.reason else f"{said}; {cell.reason}"
    status = cell.status if cell.status == Status.IMPLAUSIBLE else Status.VIOLATION  # the verdicts' order
    return replace(cell, status=status, reason=reason)


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


def _load_average() -> float | None:
    """1-minute load average while the cell ran: explains a noisy cell on a shared machine."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return None
