"""A/B timing of two revisions of a plugin: one bench run with each side a contender, in interleaved rounds.

BASE and HEAD are usually the same plugin file (or ``ROOT::MODULE``) from two checkouts, so they
register the same names. Each side's declarations are read in a worker of its own, with its checkout
first on ``sys.path``; implementation NAME then runs as contenders ``NAME@base.1`` and ``NAME@head.1``,
``NAME@base.2`` and ``NAME@head.2``, and so on (:data:`~harness.contract.discovery.CONTENDER`: no declared
name holds it), each in a worker process of its own, so two revisions of one package never share imported
code; this process imports neither. The rounds are spread over ``processes`` pairs of workers: a process's
time per call depends on where its buffers landed in memory, for the whole life of the process (1.3-1.7x
between fresh processes of the same code, measured), so one pair would compare two draws of that, not only
two revisions. The comparison widens its interval to hold every pair's median ratio.

The timing is bench's, whole (:func:`harness.bench.session.run`): the parent drives every call of a CPU
cell (fresh inputs it writes, its clock, the worker's tree stopped between calls), the contenders of a case
run in shuffled rounds beside the roof probe, the drawn calls are checked against float64, and each side's
cell is judged (a side faster than physics allows is ``implausible``). ab only sets the rounds: ``rounds``
rounds of ``calls`` timed calls per side. The record is that bench result file, raw samples and round
sizes; the comparison is a view of it (:func:`paired_rounds`): per round, head's fastest call over base's.
A round lasts tens of milliseconds, so a load change between rounds hits both sides alike and the ratio
cancels it (:func:`harness.analysis.comparison.judge_paired`). On a GPU, bench times a cell alone: the
sides' calls are cut into rounds of ``calls`` in order, one side after the other, not interleaved.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness.bench.settings import ABSettings as ABSettings  # its home before settings.py
from harness.bench.settings import BenchSettings
from harness.bench.timing import TimingConfig
from harness.case.attention import AttentionCase
from harness.contract.discovery import CONTENDER, Registry
from harness.errors import UsageError
from harness.results import BenchCell, Floor, Status
from harness.runtime.isolation import OK, Task, WorkerPool
from harness.runtime.provenance import Provenance, plugin_provenance

BASE, HEAD = "base", "head"
SIDES = (BASE, HEAD)


def contender(name: str, side: str, process: int = 1) -> str:
    """The contender that times ``name`` from ``side``'s checkout in its ``process``-th worker."""
    return f"{name}{CONTENDER}{side}.{process}"


def side_task(source: str) -> tuple[Registry, Provenance]:
    """Worker: what ``source`` alone declares, as records (no code: :func:`harness.bench.catalogue.record`), and
    its provenance (commit, imported packages) as this worker saw them."""
    from harness.bench.catalogue import record
    from harness.contract.discovery import load_source

    loaded = load_source(source)
    records = Registry(sources=dict(loaded.sources))
    records.implementations = {name: record(impl) for name, impl in loaded.implementations.items()}
    return records, plugin_provenance([source])


@dataclass
class CellRounds:
    """One cell of the comparison: per side its time in each round (the fastest call), and what went wrong."""

    implementation: str
    case: AttentionCase
    mode: str
    base_s: list[float] = field(default_factory=list)
    head_s: list[float] = field(default_factory=list)
    first: list[str] = field(default_factory=list)
    """Which side ran first in each round (empty where the sides were not interleaved)."""
    load: list[float] = field(default_factory=list)
    """1-minute load averages read while the sides ran."""
    status: str = "ok"
    """ok, skipped, or the status (error, crash, timeout, violation, wrong, implausible) of the side that failed."""
    reason: str | None = None
    side: str | None = None
    """The side that failed or cannot run the cell (None: both ran)."""
    floor: Floor | None = None
    """The physics floor head's calls were held against (None: not computed)."""
    processes: int = 1
    """The pairs of worker processes the rounds were spread over, in order (equal shares)."""

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


def _names(declared: dict[str, dict[str, str]], settings: ABSettings) -> list[str]:
    """The implementations both sides declare (kernels, unless named by --only), in base's order."""
    base, head = declared[BASE], declared[HEAD]
    common = [n for n in base if n in head]
    wanted = [n.strip() for raw in settings.only for n in raw.split(",") if n.strip()]
    if wanted:
        missing = {side: [n for n in wanted if n not in declared[side]] for side in SIDES}
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


def _sides(settings: ABSettings) -> tuple[Registry, dict[str, Provenance]]:
    """Both sides' contenders in one registry of records, each read in a worker of its own."""
    loaded: dict[str, Registry] = {}
    provenance: dict[str, Provenance] = {}
    for side in SIDES:
        source = getattr(settings, side)
        with WorkerPool(timeout=settings.timeout_s, start_method="forkserver") as pool:
            outcome = pool.run(Task(side, side_task, (source,)))
        if outcome.status != OK:
            raise UsageError(f"{side} {source}: could not be loaded in its worker: {outcome.error}")
        loaded[side], provenance[side] = outcome.value
    names = _names({side: {impl.name: impl.declared.kind for impl in reg} for side, reg in loaded.items()}, settings)
    registry = Registry()
    for name in names:
        for process in range(1, settings.processes + 1):
            for side in SIDES:
                label = contender(name, side, process)
                registry.implementations[label] = dataclasses.replace(loaded[side].get(name), name=label)
                registry.sources[label] = loaded[side].sources[name]
    return registry, provenance


def rounds_per_process(settings: ABSettings) -> int:
    """Each pair of workers' share of the ``rounds``, rounded up."""
    return -(-settings.rounds // settings.processes)


def bench_settings(settings: ABSettings, contenders: Sequence[str]) -> BenchSettings:
    """The bench run an A/B comparison is: each pair of worker processes' share of the ``rounds``, of ``calls``
    timed calls per contender (one warm-up call before the first), no memory or value probe, no cell skipped for
    time."""
    rounds = rounds_per_process(settings)
    calls = settings.calls * rounds
    timing = TimingConfig(warmup_s=0.0, budget_s=0.0, min_samples=calls, max_samples=calls, rounds=rounds,
                          clock=settings.clock)
    return BenchSettings(suite=settings.suite, overrides=dict(settings.overrides), only=list(contenders),
                         plugins=[settings.base, settings.head], timeout_s=settings.timeout_s, timing=timing,
                         memory=False, cell_budget_s=None, threads=settings.threads, device=settings.device,
                         value_probe="off")


def run_ab(settings: ABSettings, out: Path, on_cell: Callable[[BenchCell], None] = lambda cell: None) -> ABRun:
    """Time every planned cell of both sides in one bench run written to ``out``; its comparison as a view."""
    from harness.bench.session import run

    registry, provenance = _sides(settings)
    timed = run(bench_settings(settings, list(registry.implementations)), out, force=True, registry=registry,
                on_cell=on_cell)
    return ABRun(settings=settings, cells=paired_rounds(timed.bench_cells(), settings.calls), provenance=provenance)


def _fastest(samples: Sequence[float], sizes: Sequence[int]) -> list[float]:
    """The fastest call of each round (``sizes`` splits ``samples`` in order): a preempted call is only ever
    longer."""
    out, at = [], 0
    for size in sizes:
        if size:
            out.append(min(samples[at:at + size]))
        at += size
    return out


def _rounds_of(cell: BenchCell, calls: int) -> tuple[list[float], list[int]]:
    """The cell's per-round fastest calls and its place in each round."""
    if cell.rounds is not None and cell.rounds.sizes:
        return _fastest(cell.samples_s, cell.rounds.sizes), list(cell.rounds.positions or ())
    return _fastest(cell.samples_s, [calls] * (len(cell.samples_s) // max(calls, 1))), []


Processes = dict[int, dict[str, BenchCell]]
"""One cell of the comparison's bench cells: by worker pair (1, 2, ...), by side."""


def _by_process(cells: Sequence[BenchCell]) -> dict[tuple[str, str, str], Processes]:
    groups: dict[tuple[str, str, str], Processes] = {}
    for cell in cells:
        name, _, label = cell.implementation.partition(CONTENDER)
        side, _, index = label.partition(".")
        if side in SIDES and cell.attention_case is not None:
            groups.setdefault((name, cell.case_id, cell.mode), {}).setdefault(int(index or 1), {})[side] = cell
    return groups


def _failed(pair: CellRounds, by_process: Processes) -> bool:
    """Stop ``pair`` at the first side (base first) that did not end ``ok`` in some worker pair."""
    for who in SIDES:
        for process in sorted(by_process):
            timed = by_process[process].get(who)
            if timed is None:
                pair.stop(who, "error", "no cell was measured")
                return True
            if timed.status != Status.OK:
                pair.stop(who, Status(timed.status).value, timed.reason or "")
                return True
    return False


def paired_rounds(cells: Sequence[BenchCell], calls: int) -> list[CellRounds]:
    """The comparison's cells from a bench run's: each implementation's base and head cells of a case paired
    round by round, worker pair by worker pair (``NAME@base.1`` with ``NAME@head.1``, ...), the pairs' rounds in
    order. A side that did not end ``ok`` in any pair stops its cell (base first: a base that failed leaves nothing
    to compare against; a head that failed while base ran fails the comparison)."""
    out = []
    for (name, _, mode), by_process in _by_process(cells).items():
        sides = [c for by_side in by_process.values() for c in by_side.values()]
        pair = CellRounds(name, sides[0].attention_case, mode, processes=len(by_process))  # type: ignore[arg-type]
        pair.load = [c.load_average for c in sides if c.load_average is not None]
        pair.floor = next((c.integrity.floor for c in sides if c.implementation.partition(CONTENDER)[2].startswith(HEAD)
                           and c.integrity is not None), None)
        if not _failed(pair, by_process):
            for process in sorted(by_process):
                base_s, base_at = _rounds_of(by_process[process][BASE], calls)
                head_s, head_at = _rounds_of(by_process[process][HEAD], calls)
                n = min(len(base_s), len(head_s))
                pair.base_s += base_s[:n]
                pair.head_s += head_s[:n]
                if len(base_at) == len(head_at) == len(base_s):
                    pair.first += [BASE if b < h else HEAD for b, h in zip(base_at[:n], head_at[:n])]
        out.append(pair)
    return out
