"""Compare two stored benchmark runs cell by cell, where such a comparison can decide.

The unit of replication is the run (or the round), never the sample: the samples of one run share
its load, so a test on the raw samples of two runs answers "did these two runs differ" (on a shared
machine, always), not "did the code get slower". So cells whose samples are **rounds**
(``sample_unit="round"``: the side files of ``attnbench ab``) are tested with Mann-Whitney U over
the rounds beside the ratio of medians, as asv does; cells of two separate runs are decided by the
ratio only where the runs' own noise and load cannot explain it
(:func:`harness.analysis.paired.noise_allowance`), else they are **undecided** ("not comparable:
base IQR 45%, load 6.2"), never a regression, and the answer recommends ``attnbench ab``.

A ratio is never taken across two kinds of cluster node (such a cell is ``not comparable`` and
says both); local runs are compared with a warning when their environments differ.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harness.analysis.paired import UNDECIDED, RunNoise, decide_runs, noise_allowance
from harness.errors import UsageError
from harness.report.compare_inputs import check_inputs
from harness.report.sources import load_run
from harness.results import BenchCell, Run, Stats, Status, node_kind
from harness.runtime.cluster.node import kind_of

DEFAULT_THRESHOLD = 0.25
DEFAULT_ALPHA = 0.05
REGRESSION, IMPROVEMENT, UNCHANGED = "regression", "improvement", "unchanged"
ONLY_BASE, ONLY_NEW, NOT_COMPARABLE = "only in base", "only in new", "not comparable"
NEWLY_FAILING = "newly failing"
"""Measured in the base run; errored, crashed or timed out in the new one: worse than any slow-down."""


def parse_threshold(text: str) -> float:
    """``"25%"`` or ``"0.25"`` -> 0.25; a bare number >= 1 is ambiguous and refused."""
    raw = str(text).strip()
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        raise UsageError(f"--threshold {text!r}: not a number; write a percentage such as 25%") from None
    if not raw.endswith("%") and value >= 1:
        raise UsageError(f"--threshold {text!r} is ambiguous; write {raw}% or a fraction such as 0.25")
    if not 0 < value <= 10:
        raise UsageError(f"--threshold {text!r}: must be above 0% and at most 1000%")
    return value


def min_p_value(n_base: int, n_new: int) -> float:
    """The smallest two-sided Mann-Whitney p-value possible with these sample counts (exact test).

    2 / C(n+m, n), computed in log space: C(1000+1000, 1000) is about 1e600, past a float.
    """
    log_comb = math.lgamma(n_base + n_new + 1) - math.lgamma(n_base + 1) - math.lgamma(n_new + 1)
    return min(1.0, 2.0 * math.exp(-log_comb))


@dataclass
class CellComparison:
    implementation: str
    case_id: str
    mode: str
    verdict: str
    base_median: float | None = None
    new_median: float | None = None
    ratio: float | None = None
    """new median / base median: above 1 is slower."""
    p_value: float | None = None
    """Mann-Whitney U over rounds (cells whose samples are rounds only)."""
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
    def regressions(self) -> list[CellComparison]:
        return sorted(self.with_verdict(REGRESSION), key=lambda c: -(c.ratio or 0))

    @property
    def newly_failing(self) -> list[CellComparison]:
        return self.with_verdict(NEWLY_FAILING)

    @property
    def failed(self) -> bool:
        """True when CI should fail: a significant regression, or a cell that no longer runs."""
        return bool(self.regressions or self.newly_failing)

    @property
    def undecided(self) -> list[CellComparison]:
        """Cells beyond what the runs' noise lets a comparison decide: time them with ``attnbench ab``."""
        return self.with_verdict(UNDECIDED)

    @property
    def improvements(self) -> list[CellComparison]:
        return sorted(self.with_verdict(IMPROVEMENT), key=lambda c: c.ratio or 0)

    def as_dict(self) -> dict[str, Any]:
        return {"base": self.base, "new": self.new, "threshold": self.threshold, "alpha": self.alpha,
                "regressions": len(self.regressions), "improvements": len(self.improvements),
                "newly_failing": len(self.newly_failing), "undecided": len(self.undecided), "failed": self.failed,
                "warnings": self.warnings, "cells": [asdict(c) for c in self.cells]}


def _timing(cell: BenchCell) -> tuple[list[float], float | None, float | None]:
    """The cell's samples, median and IQR/median, from its stats (every typed cell arrives with them: a
    pytest-benchmark file's are summarised by its reader)."""
    samples = [float(x) for x in cell.samples_s]
    stats = cell.stats or Stats()
    if stats.median is None:
        return samples, None, None
    spread = stats.iqr_over_median
    return samples, float(stats.median), None if spread is None else float(spread)


def compare_cell(key: tuple[str, str, str], base: BenchCell, new: BenchCell, threshold: float,
                 alpha: float, base_cores: int | None = None, new_cores: int | None = None) -> CellComparison:
    """One cell's verdict from its two runs (``*_cores``: the cores of each run's machine, to weigh its load)."""
    out = CellComparison(*key, verdict=NOT_COMPARABLE, base_status=base.status.value, new_status=new.status.value)
    if base.status != Status.OK or new.status != Status.OK:
        out.note = f"status: base {base.status}, new {new.status}"
        if base.status == Status.OK and new.status.is_problem:
            out.verdict = NEWLY_FAILING
            out.note += f" ({new.reason})"
        return out
    (xs, out.base_median, out.base_noise), (ys, out.new_median, out.new_noise) = _timing(base), _timing(new)
    out.n_base, out.n_new = len(xs), len(ys)
    out.base_load, out.new_load = base.load_average, new.load_average
    if not out.base_median or out.new_median is None:
        out.note = "no timing"
        return out
    out.ratio = out.new_median / out.base_median
    if base.sample_unit == "round" and new.sample_unit == "round":
        return _rounds(out, xs, ys, threshold, alpha)
    noise = (RunNoise(out.base_noise, out.base_load, base_cores), RunNoise(out.new_noise, out.new_load, new_cores))
    out.allowance = noise_allowance(*noise)
    out.verdict = decide_runs(out.ratio, out.allowance, threshold)
    if out.verdict == UNDECIDED:
        out.note = (f"not comparable: {noise[0].describe('base')}; {noise[1].describe('new')}: the runs' noise "
                    f"allows {out.allowance:.2f}x; time both together with `attnbench ab`")
    return out


def _rounds(out: CellComparison, xs: list[float], ys: list[float], threshold: float, alpha: float) -> CellComparison:
    """Cells whose samples are rounds: Mann-Whitney U over the rounds, with the ratio of medians."""
    beyond = out.ratio is not None and (out.ratio > 1 + threshold or out.ratio < 1 / (1 + threshold))
    if len(xs) < 2 or len(ys) < 2 or min_p_value(len(xs), len(ys)) >= alpha:
        out.verdict = UNDECIDED if beyond else UNCHANGED
        out.note = f"too few rounds ({len(xs)} vs {len(ys)}) for the test to reach p<{alpha}"
        return out
    from scipy.stats import mannwhitneyu

    out.p_value = float(mannwhitneyu(xs, ys, alternative="two-sided").pvalue)
    if beyond and out.p_value < alpha:
        out.verdict = REGRESSION if (out.ratio or 0) > 1 else IMPROVEMENT
    else:
        out.verdict = UNCHANGED
        if beyond:
            out.note = f"beyond the threshold but not significant over rounds (p={out.p_value:.3g})"
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
    for key in sorted(set(a) | set(b)):
        if key not in b:
            result.cells.append(CellComparison(*key, verdict=ONLY_BASE))
        elif key not in a:
            result.cells.append(CellComparison(*key, verdict=ONLY_NEW))
        elif (elsewhere := _other_machines(base_run, new_run, a[key], b[key])) is not None:
            result.cells.append(CellComparison(*key, verdict=NOT_COMPARABLE, base_status=a[key].status.value,
                                               new_status=b[key].status.value, note=elsewhere))
        else:
            result.cells.append(compare_cell(key, a[key], b[key], threshold, alpha,
                                             base_run.environment.cores, new_run.environment.cores))
    return result
