"""A/B timing of two revisions of a plugin: one bench run with each side a contender, in interleaved rounds.

BASE and HEAD are usually the same plugin file (or ``ROOT::MODULE``) from two checkouts, so they
register the same names. Each side's declarations are read in a worker of its own, with its checkout
first on ``sys.path``; implementation NAME then runs as two contenders, ``NAME@base`` and ``NAME@head``
(:data:`~harness.contract.discovery.CONTENDER`: no declared name holds it), each in workers of its own, so
two revisions of one package never share imported code; this process imports neither.

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


def contender(name: str, side: str) -> str:
    """The contender that times ``name`` from ``side``'s checkout."""
    return f"{name}{CONTENDER}{side}"


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
        for side in SIDES:
            label = contender(name, side)
            registry.implementations[label] = dataclasses.replace(loaded[side].get(name), name=label)
            registry.sources[label] = loaded[side].sources[name]
    return registry, provenance


def bench_settings(settings: ABSettings, contenders: Sequence[str]) -> BenchSettings:
    """The bench run an A/B comparison is: ``rounds`` rounds of ``calls`` timed calls per contender (one warm-up
    call before the first), no memory or value probe, no cell skipped for time."""
    calls = settings.calls * settings.rounds
    timing = TimingConfig(warmup_s=0.0, budget_s=0.0, min_samples=calls, max_samples=calls, rounds=settings.rounds,
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


def paired_rounds(cells: Sequence[BenchCell], calls: int) -> list[CellRounds]:
    """The comparison's cells from a bench run's: each implementation's base and head cells of a case paired
    round by round. A side that did not end ``ok`` stops its cell (base first: a base that failed leaves nothing
    to compare against; a head that failed while base ran fails the comparison)."""
    by_key = {(c.implementation, c.case_id, c.mode): c for c in cells}
    out = []
    for base in cells:
        name, _, side = base.implementation.partition(CONTENDER)
        if side != BASE or base.attention_case is None:
            continue
        head = by_key.get((contender(name, HEAD), base.case_id, base.mode))
        pair = CellRounds(name, base.attention_case, base.mode)
        pair.load = [c.load_average for c in (base, head) if c is not None and c.load_average is not None]
        for who, cell in ((BASE, base), (HEAD, head)):
            if cell is None:
                pair.stop(who, "error", "no cell was measured")
            elif cell.status != Status.OK:
                pair.stop(who, Status(cell.status).value, cell.reason or "")
            if pair.status != "ok":
                break
        if head is not None and head.integrity is not None:
            pair.floor = head.integrity.floor
        if pair.status == "ok" and head is not None:
            pair.base_s, base_at = _rounds_of(base, calls)
            pair.head_s, head_at = _rounds_of(head, calls)
            if len(base_at) == len(head_at) == len(pair.base_s):
                pair.first = [BASE if b < h else HEAD for b, h in zip(base_at, head_at)]
        out.append(pair)
    return out
