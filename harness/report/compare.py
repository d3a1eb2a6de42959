"""Compare two stored benchmark runs cell by cell with the comparison engine (:mod:`harness.analysis.comparison`).

The unit of replication is the run (or the round), never the sample: the samples of one run share its
load, so no test on the raw samples of two runs answers "did the code get slower". Per cell the engine is
given what the files hold:

- the two sides of one ``attnbench ab`` run (``sample_unit="round"``, the same ``ab`` settings and round
  count in both files): the rounds are paired again, so ``compare`` reads the same per-round ratios ``ab``
  judged and gives the same verdict;
- rounds of two separate ``ab`` runs: independent replications on each side;
- calls of two separate runs (``bench``, pytest-benchmark): the ratio of medians, its interval widened by
  the runs' own spread and, on the wall clock only, their load (CPU-clock cells get no load stretch).

The level is Bonferroni-shared over the compared cells, as ``ab`` does. A ratio is never taken across two
kinds of cluster node (such a cell is ``not comparable`` and says both); local runs are compared with a
warning when their environments differ.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harness.analysis.comparison import (
    DEFAULT_ALPHA,
    DEFAULT_THRESHOLD,
    FASTER,
    SLOWER,
    UNCHANGED,
    UNDECIDED,
    Side,
    Verdict,
    interval_words,
    judge_paired,
    judge_separate,
    per_cell_alpha,
)
from harness.errors import UsageError
from harness.report.compare_inputs import check_inputs
from harness.report.sources import load_run
from harness.results import BenchCell, Run, Status, node_kind
from harness.runtime.cluster.node import kind_of

__all__ = ["DEFAULT_ALPHA", "DEFAULT_THRESHOLD", "FASTER", "SLOWER", "UNCHANGED", "UNDECIDED", "compare_files",
           "parse_threshold"]

ONLY_BASE, ONLY_NEW, NOT_COMPARABLE = "only in base", "only in new", "not comparable"
NEWLY_FAILING = "newly failing"
"""Measured in the base run; errored, crashed or timed out in the new one: worse than any slow-down."""


def parse_threshold(text: str) -> float:
    """``"10%"`` or ``"0.1"`` -> 0.1 (:func:`harness.analysis.comparison.parse_threshold`); bad text: a usage error."""
    from harness.analysis.comparison import parse_threshold as parse

    try:
        return parse(text)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


@dataclass
class CellComparison:
    implementation: str
    case_id: str
    mode: str
    verdict: str
    base_median: float | None = None
    new_median: float | None = None
    ratio: float | None = None
    """new / base (the median per-round ratio for paired rounds, else the ratio of medians): above 1 is slower."""
    low: float | None = None
    high: float | None = None
    """The cell's 95% interval for the ratio (its share of the comparison's joint level)."""
    mde: float | None = None
    """Minimum detectable effect: the smallest ratio this cell's noise lets it decide (None: nothing decidable)."""
    method: str | None = None
    """How the engine read the cell: "paired rounds", "separate rounds" or "separate runs"."""
    clock: str | None = None
    """"cpu" or "wall": what timed the cell's calls (a CPU clock gets no load stretch)."""
    n_base: int = 0
    n_new: int = 0
    base_status: str | None = None
    new_status: str | None = None
    base_noise: float | None = None
    """IQR / median of the base cell's samples."""
    new_noise: float | None = None
    base_load: float | None = None
    new_load: float | None = None
    allowance: float | None = None
    """The factor the runs' noise and load allow between two runs of the same code (separate runs only)."""
    note: str = ""


@dataclass
class Comparison:
    base: str
    new: str
    threshold: float
    alpha: float
    cells: list[CellComparison] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def with_verdict(self, verdict: str) -> list[CellComparison]:
        return [c for c in self.cells if c.verdict == verdict]

    @property
    def slower(self) -> list[CellComparison]:
        return sorted(self.with_verdict(SLOWER), key=lambda c: -(c.ratio or 0))

    @property
    def newly_failing(self) -> list[CellComparison]:
        return self.with_verdict(NEWLY_FAILING)

    @property
    def failed(self) -> bool:
        """True when CI should fail: a cell decided slower, or a cell that no longer runs."""
        return bool(self.slower or self.newly_failing)

    @property
    def undecided(self) -> list[CellComparison]:
        """Cells whose noise decides neither way: time them with ``attnbench ab`` (or more rounds)."""
        return self.with_verdict(UNDECIDED)

    @property
    def faster(self) -> list[CellComparison]:
        return sorted(self.with_verdict(FASTER), key=lambda c: c.ratio or 0)

    @property
    def compared(self) -> int:
        return sum(c.ratio is not None for c in self.cells)

    def as_dict(self) -> dict[str, Any]:
        return {"base": self.base, "new": self.new, "threshold": self.threshold, "alpha": self.alpha,
                "interval": interval_words(self.alpha), "confidence": 1 - self.alpha,
                "false_alarm_bound": self.alpha / 2,
                "slower": len(self.slower), "faster": len(self.faster), "unchanged": len(self.with_verdict(UNCHANGED)),
                "undecided": len(self.undecided), "newly_failing": len(self.newly_failing), "failed": self.failed,
                "warnings": self.warnings, "cells": [asdict(c) for c in self.cells]}


def cell_clock(run: Run, cell: BenchCell) -> str:
    """"cpu" when the cell's calls were timed on a CPU clock (bench ``--clock cpu``, ab's auto clock), else "wall"."""
    integrity = cell.integrity
    if integrity is not None and integrity.stamps is not None and integrity.stamps.clock in ("cpu", "wall"):
        return str(integrity.stamps.clock)
    extra = run.config.extra
    timing = extra.get("timing")
    clock = timing.get("clock") if isinstance(timing, dict) else extra.get("clock")
    return "cpu" if clock == "cpu" and cell.case.device in (None, "cpu") else "wall"


def _side(cell: BenchCell, run: Run | None) -> Side:
    stats = cell.stats
    median = None if stats is None else stats.median
    return Side(median=float(median or 0.0), samples=tuple(float(x) for x in cell.samples_s),
                iqr_over_median=None if stats is None or stats.iqr_over_median is None else float(stats.iqr_over_median),
                load=cell.load_average, cores=None if run is None else run.environment.cores,
                clock="wall" if run is None else cell_clock(run, cell))


def _processes(run: Run | None) -> int:
    """The pairs of worker processes an ``attnbench ab`` run spread its rounds over (1 when it does not say)."""
    processes = None if run is None else run.config.extra.get("processes")
    return processes if isinstance(processes, int) and not isinstance(processes, bool) and processes > 0 else 1


def _paired_runs(base_run: Run, new_run: Run) -> bool:
    """The two files are the two sides of one ``attnbench ab`` run (same settings): their rounds pair up."""
    a, b = base_run.config.extra.get("ab"), new_run.config.extra.get("ab")
    return isinstance(a, dict) and a == b


def compare_cell(key: tuple[str, str, str], base: BenchCell, new: BenchCell, threshold: float, cell_alpha: float,
                 base_run: Run | None = None, new_run: Run | None = None, paired: bool = False) -> CellComparison:
    """One cell's verdict from its two runs, by the engine, at interval level ``1 - cell_alpha``."""
    out = CellComparison(*key, verdict=NOT_COMPARABLE, base_status=base.status.value, new_status=new.status.value)
    if base.status != Status.OK or new.status != Status.OK:
        out.note = f"status: base {base.status}, new {new.status}"
        if base.status == Status.OK and new.status.is_problem:
            out.verdict = NEWLY_FAILING
            out.note += f" ({new.reason})"
        return out
    a, b = _side(base, base_run), _side(new, new_run)
    out.base_median, out.new_median = a.median or None, b.median or None
    out.base_noise, out.new_noise = a.iqr_over_median, b.iqr_over_median
    out.base_load, out.new_load = a.load, b.load
    out.n_base, out.n_new = len(a.samples), len(b.samples)
    out.clock = a.clock if a.clock == b.clock else "wall"
    if not a.median or not b.median:
        out.note = "no timing"
        return out
    rounds = base.sample_unit == "round" and new.sample_unit == "round"
    verdict: Verdict
    if rounds and paired and len(a.samples) == len(b.samples) and all(x > 0 for x in a.samples):
        verdict = judge_paired([h / x for x, h in zip(a.samples, b.samples)], threshold, cell_alpha,
                               _processes(base_run))
    else:
        verdict = judge_separate(a, b, threshold, cell_alpha, replications=rounds)
    out.verdict, out.ratio, out.method, out.mde = verdict.verdict, verdict.ratio, verdict.method, verdict.mde_or_none
    if verdict.mde_or_none is not None:
        out.low, out.high = verdict.low, verdict.high
    out.allowance, out.note = verdict.allowance, verdict.reason
    return out


def _index(run: Run) -> dict[tuple[str, str, str], BenchCell]:
    return {(c.implementation, c.case_id, c.mode or "fwd"): c for c in run.bench_cells()}


def _machine(run: Run, cell: BenchCell) -> str:
    """The kind of machine ``cell`` ran on: its node's, or for a local run's cell the run's own."""
    kind = node_kind(cell)
    if kind is not None:
        return kind
    env = run.environment
    return kind_of({"cpu_model": env.cpu_model, "cores": env.cores, "gpu": env.gpu, "torch": env.torch})


def _other_machines(base_run: Run, new_run: Run, base: BenchCell, new: BenchCell) -> str | None:
    """Why two cells must not be divided (they ran on different kinds of machine), when one ran on a cluster."""
    if node_kind(base) is None and node_kind(new) is None:
        return None  # two local runs: compared as before, with the environment warnings
    a, b = _machine(base_run, base), _machine(new_run, new)
    return None if a == b else f"measured on different machines: base on {a}, new on {b}"


def _environment_warnings(base: Run, new: Run) -> list[str]:
    warnings = []
    old, now = base.environment, new.environment
    pairs = {"cpu_model": (old.cpu_model, now.cpu_model), "threads": (old.threads, now.threads),
             "torch": (old.torch, now.torch), "gpu": (old.gpu, now.gpu)}
    for key, (a, b) in pairs.items():
        if a is not None and b is not None and a != b:
            warnings.append(f"the runs differ in {key}: {a} vs {b}; the comparison may reflect the machine")
    return warnings


def compare_files(base: Path, new: Path, threshold: float = DEFAULT_THRESHOLD,
                  alpha: float = DEFAULT_ALPHA, *, allow_incomplete: bool = False,
                  allow_missing: bool = False) -> Comparison:
    """Compare every bench cell present in either file (two whole runs: :func:`check_inputs`)."""
    _, base_run = load_run(Path(base))
    _, new_run = load_run(Path(new))
    a, b = _index(base_run), _index(new_run)
    if not a:
        raise UsageError(f"{base}: no bench cells to compare (is it a verify result file?)")
    if not b:
        raise UsageError(f"{new}: no bench cells to compare (is it a verify result file?)")
    if not set(a) & set(b):
        raise UsageError(f"{base} and {new} have no bench cell in common (implementation, case, mode); "
                         "compare runs of the same suite")
    check_inputs(Path(base), base_run, Path(new), new_run, allow_incomplete=allow_incomplete,
                 allow_missing=allow_missing)
    result = Comparison(base=str(base), new=str(new), threshold=threshold, alpha=alpha,
                        warnings=_environment_warnings(base_run, new_run))
    keys = sorted(set(a) | set(b))
    elsewhere = {key: _other_machines(base_run, new_run, a[key], b[key]) for key in keys if key in a and key in b}
    timed = [key for key in keys if elsewhere.get(key) is None and key in a and key in b
             and a[key].status == Status.OK and b[key].status == Status.OK]
    cell_alpha = per_cell_alpha(alpha, len(timed))
    paired = _paired_runs(base_run, new_run)
    for key in keys:
        if key not in b:
            result.cells.append(CellComparison(*key, verdict=ONLY_BASE))
        elif key not in a:
            result.cells.append(CellComparison(*key, verdict=ONLY_NEW))
        elif (why := elsewhere[key]) is not None:
            result.cells.append(CellComparison(*key, verdict=NOT_COMPARABLE, base_status=a[key].status.value,
                                               new_status=b[key].status.value, note=why))
        else:
            result.cells.append(compare_cell(key, a[key], b[key], threshold, cell_alpha, base_run, new_run, paired))
    return result
