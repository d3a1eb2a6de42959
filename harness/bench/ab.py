"""A/B timing of two revisions of a plugin: interleaved rounds, each side in its own worker process.

BASE and HEAD are usually the same plugin file (or ``ROOT::MODULE``) from two checkouts, so they
register the same names. Each side loads in a worker of its own, with its checkout first on
``sys.path`` (:func:`harness.contract.discovery.load_plugin`), so two revisions of one package never share
imported code; this process imports neither.

A cell is timed in rounds. In each round both sides run, in an order drawn at random, each one
warm-up call and ``calls`` timed calls through the bench's own timed loop
(:func:`harness.bench.loop.timed_loop`: rotating input sets, kept calls checked); the round's
ratio is head's fastest call over base's. A round lasts tens of milliseconds, so a load change between
rounds hits both sides alike and the ratio cancels it (:mod:`harness.analysis.paired`).

Each side's fastest call is held against the physics floor, as bench's cells are
(:func:`harness.bench.roofs.physics_floor`: the cell's FLOPs and compulsory bytes on the larger of this
machine's theoretical roofs and twice the GEMM peak and bandwidth measured at the start, on the cells'
clock, in a worker of its own where no plugin code runs): a side faster than physics allows did not do
its work, and its cell is ``implausible`` (a head that is: a failure, never a win).
"""

from __future__ import annotations

import itertools
import os
import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from harness.bench import guard  # binds the clocks before any plugin is imported in a worker
from harness.bench.loop import timed_loop
from harness.bench.settings import ABSettings as ABSettings  # its home before settings.py
from harness.bench.sweeps import plan
from harness.bench.timing import TimingConfig, pin_threads, thread_environment, time_call
from harness.case.attention import AttentionCase
from harness.contract.discovery import load_implementation, load_source
from harness.errors import UsageError
from harness.results import Bandwidth, Floor, Peak
from harness.runtime.isolation import OK, Outcome, Task, WorkerPool
from harness.runtime.provenance import Provenance, plugin_provenance

BASE, HEAD = "base", "head"
ROOF_BUDGET_S = 0.3
"""Seconds of timed calls for each roof measured before the cells."""

# ---------------------------------------------------------------- worker side

_PREPARED: dict[tuple[str, str, str, str], list[guard.InputSet]] = {}


def declared_task(source: str) -> tuple[dict[str, str], Provenance]:
    """Worker: {name: kind} of what ``source`` declares, and its provenance (commit, imported packages)."""
    registry = load_source(source)
    return {impl.name: impl.kind for impl in registry}, plugin_provenance([source])


def support_task(source: str, name: str, case: dict[str, object], mode: str) -> list[str]:
    """Worker: why ``name`` cannot run this cell (empty: it can)."""
    impl = load_implementation(source, name)
    return list(impl.not_supported_reasons(AttentionCase.from_dict(case).with_(grad=mode != "fwd")))


def roofs_task(dtype: str, device: str, threads: int | None, clock: str) -> tuple[Peak, Bandwidth]:
    """Worker (the roofs one, no plugin code): a short GEMM peak and read/copy bandwidth on ``clock``: the
    measured halves of the physics floor (its fastest GEMM call counts, so a short measure serves)."""
    from harness.bench.bandwidth import BANDWIDTH_TIMING, measure_bandwidth
    from harness.bench.peak import PEAK_TIMING, measure_gemm_peak
    from harness.bench.timing import freeze_imports

    freeze_imports()  # each timed call's collection then scans the roof's objects, not torch's
    clock = clock if device == "cpu" else "wall"
    peak = measure_gemm_peak(dtype, device, replace(PEAK_TIMING, budget_s=ROOF_BUDGET_S, clock=clock), threads)
    bandwidth = measure_bandwidth(device, replace(BANDWIDTH_TIMING, budget_s=ROOF_BUDGET_S, clock=clock), threads)
    return peak, bandwidth


@dataclass(frozen=True)
class RoundTimes:
    """One side's part of one round: its timed calls, and what its checks found wrong."""

    samples_s: tuple[float, ...]
    problems: tuple[str, ...] = ()
    """Broken rules (a wrapper result, a patched clock, work left running): the cell is a violation."""
    wrong: tuple[str, ...] = ()
    """Kept outputs that do not match float64: the cell is wrong."""


def round_task(source: str, name: str, case: dict[str, object], mode: str, calls: int, threads: int | None,
               check_outputs: bool, clock: str = "wall") -> RoundTimes:
    """Worker: one side's turn in a round. The input sets are built on the first turn and kept, so a turn
    is a warm-up call and ``calls`` timed ones; ``check_outputs`` holds the kept calls against float64.
    ``clock``: "wall" (elapsed time) or "cpu" (the process's CPU time: what a call computed, unstretched by
    other processes sharing the cores; time spent waiting, on a sleep or a device, is not counted)."""
    from harness.bench import audit

    pin_threads(threads)
    impl = load_implementation(source, name)
    attention_case = AttentionCase.from_dict(case)
    key = (source, name, attention_case.id, mode)
    if key not in _PREPARED:
        shift = not getattr(impl, "set_up", False) and mode != "bwd"
        with audit.one_thread():
            drawn = audit.draw_sets(attention_case, audit.set_count(attention_case, False), impl.backend)
        _PREPARED.clear()  # one cell at a time: the previous cell's inputs are not needed again
        _PREPARED[key] = [audit.build_set(impl, attention_case, mode, inputs, seed, shift)
                          for seed, inputs in enumerate(drawn)]
    sets = _PREPARED[key]
    config = TimingConfig(warmup_s=0.0, budget_s=0.0, min_samples=calls, max_samples=calls)
    if attention_case.device == "cuda":  # CUDA events around each call, as bench does (rotation only)
        turn = itertools.cycle(sets)
        return RoundTimes(samples_s=tuple(time_call(lambda: next(turn).call(), "cuda", config)))
    loop = timed_loop(sets, config, impl.backend, sample_clock=guard.CPU_CLOCK if clock == "cpu" else None)
    problems = [k.problem for k in loop.kept if k.problem]
    if loop.untyped:
        problems.append(f"timed calls {loop.untyped[:5]} returned something other than an exact array")
    patched = guard.clock_problem()
    if patched:
        problems.append(patched)
    wrong = audit.check_kept(loop.kept, sets, attention_case, mode).problems if check_outputs else []
    return RoundTimes(samples_s=tuple(loop.samples), problems=tuple(problems), wrong=tuple(wrong))


# ---------------------------------------------------------------- parent side


@dataclass
class CellRounds:
    """One cell timed in rounds: per side its time in each round (the fastest call), and what went wrong."""

    implementation: str
    case: AttentionCase
    mode: str
    base_s: list[float] = field(default_factory=list)
    head_s: list[float] = field(default_factory=list)
    first: list[str] = field(default_factory=list)
    """Which side ran first in each round."""
    load: list[float] = field(default_factory=list)
    """1-minute load average after each round."""
    status: str = "ok"
    """ok, skipped, or the outcome (error, crash, timeout, violation, wrong) of the side that failed."""
    reason: str | None = None
    side: str | None = None
    """The side that failed or cannot run the cell (None: both ran)."""
    floor: Floor | None = None
    """The physics floor each side's fastest call was held against (None: not computed)."""

    def stop(self, side: str, status: str, reason: str) -> None:
        self.status, self.side, self.reason = status, side, f"{side}: {reason}"

    @property
    def ratios(self) -> list[float]:
        return [h / b for b, h in zip(self.base_s, self.head_s) if b > 0]


@dataclass
class ABRun:
    settings: ABSettings
    cells: list[CellRounds]
    provenance: dict[str, Provenance]
    """Side -> its plugin's commit and imported packages."""


def _check(outcome: Outcome, side: str, source: str) -> Any:
    if outcome.status != OK:
        raise UsageError(f"{side} {source}: could not be loaded in its worker: {outcome.error}")
    return outcome.value


def _names(declared: dict[str, dict[str, str]], settings: ABSettings) -> list[str]:
    """The implementations both sides declare (kernels, unless named by --only), in base's order."""
    base, head = declared[BASE], declared[HEAD]
    common = [n for n in base if n in head]
    wanted = [n.strip() for raw in settings.only for n in raw.split(",") if n.strip()]
    if wanted:
        missing = {side: [n for n in wanted if n not in declared[side]] for side in (BASE, HEAD)}
        for side, names in missing.items():
            if names:
                raise UsageError(f"--only {', '.join(names)}: not declared by {side} "
                                 f"({getattr(settings, side)} declares {', '.join(declared[side]) or 'nothing'})")
        return wanted
    names = [n for n in common if base[n] == "kernel"]
    if not names:
        raise UsageError(f"base and head declare no kernel implementation of the same name (base: "
                         f"{', '.join(base) or 'none'}; head: {', '.join(head) or 'none'}); give the same plugin "
                         "from two revisions, or name the implementations with --only")
    return names


def run_ab(settings: ABSettings, on_cell: Callable[[CellRounds], None] = lambda cell: None) -> ABRun:
    """Time every planned cell of both sides in interleaved rounds."""
    rng: random.Random = random.Random(settings.seed) if settings.seed is not None else random.SystemRandom()
    sources = {BASE: settings.base, HEAD: settings.head}
    with thread_environment(settings.threads), WorkerPool(timeout=settings.timeout_s) as base_pool, \
            WorkerPool(timeout=settings.timeout_s) as head_pool:
        pools = {BASE: base_pool, HEAD: head_pool}
        declared, provenance = {}, {}
        for side, pool in pools.items():
            declared[side], provenance[side] = _check(pool.run(Task(side, declared_task, (sources[side],))),
                                                      side, sources[side])
        cells = plan(settings.suite, _names(declared, settings), settings.overrides, settings.device)
        if not cells:
            raise UsageError(f"--suite {settings.suite} with these flags plans no cell; widen the axis flags")
        done = []
        with WorkerPool(timeout=settings.timeout_s) as roofs_pool:
            roofs: dict[tuple[str, str], tuple[Peak | None, Bandwidth | None]] = {}
            for planned in cells:
                cell = CellRounds(planned.implementation, planned.case, planned.mode)
                _time_cell(cell, settings, sources, pools, rng)
                if cell.status == "ok":
                    cell.floor = _floor(cell, _roofs(roofs, roofs_pool, cell.case, settings))
                    _hold_to_floor(cell)
                done.append(cell)
                on_cell(cell)
    return ABRun(settings=settings, cells=done, provenance=provenance)


def _time_cell(cell: CellRounds, settings: ABSettings, sources: dict[str, str], pools: dict[str, WorkerPool],
               rng: random.Random) -> None:
    case = cell.case.to_dict()
    for side in (BASE, HEAD):
        outcome = pools[side].run(Task(side, support_task, (sources[side], cell.implementation, case, cell.mode)))
        if outcome.status != OK:
            cell.stop(side, outcome.status, str(outcome.error))
            return
        if outcome.value:
            cell.stop(side, "skipped", "; ".join(outcome.value))
            return
    for index in range(settings.rounds):
        order = [BASE, HEAD]
        rng.shuffle(order)
        times: dict[str, float] = {}
        for side in order:
            args = (sources[side], cell.implementation, case, cell.mode, settings.calls, settings.threads, index == 0,
                    settings.clock)
            outcome = pools[side].run(Task(side, round_task, args))
            if outcome.status != OK:
                cell.stop(side, outcome.status, str(outcome.error))
                return
            part: RoundTimes = outcome.value
            if part.problems or part.wrong:
                cell.stop(side, "violation" if part.problems else "wrong", "; ".join(part.problems + part.wrong))
                return
            times[side] = min(part.samples_s)  # a preempted call is only ever longer: the fastest call of the turn
        cell.base_s.append(times[BASE])
        cell.head_s.append(times[HEAD])
        cell.first.append(order[0])
        try:
            cell.load.append(os.getloadavg()[0])
        except OSError:
            pass


def _roofs(known: dict[tuple[str, str], tuple[Peak | None, Bandwidth | None]], pool: WorkerPool, case: AttentionCase,
           settings: ABSettings) -> tuple[Peak | None, Bandwidth | None]:
    """The measured roofs of the case's dtype and device, measured once a run (None where the measure failed: the
    theoretical roofs alone then make the floor, on a CPU)."""
    key = (case.dtype, case.device)
    if key not in known:
        outcome = pool.run(Task(f"roofs {case.dtype}/{case.device}", roofs_task,
                                (case.dtype, case.device, settings.threads, settings.clock)))
        known[key] = outcome.value if outcome.status == OK else (None, None)
    return known[key]


def _floor(cell: CellRounds, roofs: tuple[Peak | None, Bandwidth | None]) -> Floor:
    from harness.bench.roofs import cpu_roofs, physics_floor
    from harness.reference.flops import attention_flops, compulsory_bytes

    peak, bandwidth = roofs
    return physics_floor(attention_flops(cell.case, cell.mode), float(compulsory_bytes(cell.case, cell.mode)),
                         cell.case.dtype, cell.case.device, peak, bandwidth,
                         cpu_roofs() if cell.case.device == "cpu" else None)


def _hold_to_floor(cell: CellRounds) -> None:
    """The cell ``implausible`` when a side's fastest call is under the physics floor (head first: a head that
    is fails the comparison; a base that is leaves nothing to compare against)."""
    floor = cell.floor
    if floor is None or not floor.floor_s:
        return
    for side, times in ((HEAD, cell.head_s), (BASE, cell.base_s)):
        if times and min(times) < floor.floor_s:
            cell.stop(side, "implausible",
                      f"fastest call {min(times) * 1e3:.3g} ms is under the physics floor {floor.floor_s * 1e3:.3g} ms "
                      f"(compute roof {floor.compute_roof_gflops or 0.0:.4g} GFLOP/s, memory roof "
                      f"{floor.memory_roof_gbps or 0.0:.4g} GB/s: upper estimates): it did not do the work")
            return
