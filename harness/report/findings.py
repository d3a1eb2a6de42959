"""The report's analysis, done once: sweeps and their fits, speedups, margins, noise, values and integrity.

:func:`analyse` reads the tidy tables of :mod:`harness.report.load` and derives everything a
report says; the plots and the HTML and Markdown writers receive the :class:`Analysis` and only
format it. Every cost model is read from the fits bench stored, or, where no file stored it (an older file,
several files combined), fitted by the same function (:func:`harness.analysis.sweepfits.sweep_fits`); one fit per
implementation and sweep, so the table, the plots and the summary cannot disagree about a number.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

import pandas as pd

from harness.analysis.growth import Row
from harness.analysis.slices import Sweep, sweep
from harness.analysis.stats import is_noisy, noise_cause
from harness.analysis.sweepfits import SweepFit, sorted_rows, sweep_fits
from harness.analysis.values import Values, value_findings
from harness.report import tables, trust
from harness.report.headline import Line, headline
from harness.report.load import Results
from harness.results import BenchCell, Stats, Status


@dataclass(frozen=True)
class Noise:
    """How far to trust small differences: timed cells whose IQR/median is at least 10%."""

    noisy: int
    timed: int
    cause: str = ""
    """Why, from the load measured while the noisy cells ran (:func:`harness.analysis.stats.noise_cause`)."""

    @property
    def note(self) -> str:
        if not self.noisy:
            return ""
        return (f"{self.noisy} of {self.timed} timed cells are noisy (IQR/median >= 10%): {self.cause}; "
                "fitted exponents and speedups from those cells are rough")


@dataclass(frozen=True)
class Analysis:
    """Everything a report shows, derived from the result files once."""

    results: Results
    baseline: str
    fits: tuple[SweepFit, ...]
    """Each sweep found in the bench cells, with one cost-model fit per implementation along it."""
    speedup: pd.DataFrame
    """implementation, T, speedup (baseline median / implementation median) along the main T sweep."""
    matrix: pd.DataFrame
    """The correctness matrix (:func:`harness.report.tables.correctness_matrix`)."""
    failures: pd.DataFrame
    margins: pd.DataFrame
    """Per implementation its worst error / bound (:func:`harness.report.tables.worst_margins`)."""
    noise: Noise
    untrusted: pd.DataFrame
    """Bench cells that failed the integrity checks (implausible, violation, wrong)."""
    bench_table: pd.DataFrame
    headline: tuple[Line, ...]
    values: Values = dataclasses.field(default_factory=lambda: Values(0, ()))
    """The value probe's findings: cells whose time depends on their input values (:mod:`harness.analysis.values`),
    derived here from the stored samples."""
    set_aside: pd.DataFrame = dataclasses.field(default_factory=lambda: trust.set_aside(pd.DataFrame()))
    """Each bench cell left out of the rankings and speedups, or counted but flagged, once, with why
    (:func:`harness.report.trust.set_aside`)."""

    @property
    def roof_problems(self) -> pd.DataFrame:
        """Bench cells faster than a roof measured beside them: measurement problems, never a result."""
        return tables.roof_problems(self.results.bench)

    @property
    def rows(self) -> list[Row]:
        """Every fit, in the complexity table's order."""
        return sorted_rows(list(self.fits))

    @property
    def complexity(self) -> pd.DataFrame:
        return tables.complexity_frame(self.rows)

    @property
    def flagged(self) -> list[Row]:
        return [r for r in self.rows if r.flagged]

    @property
    def problem_count(self) -> int:
        verify = self.results.verify
        return 0 if verify.empty else int(verify["status"].isin(tables.PROBLEMS).sum())

    def sweep_fit(self, name: str) -> SweepFit | None:
        """The sweep called ``name`` (time_vs_T, memory_vs_T, ...), if the cells hold it."""
        return next((f for f in self.fits if f.name == name), None)


def speedup_table(bench: pd.DataFrame, baseline: str) -> tuple[Sweep | None, pd.DataFrame]:
    """Per T in the main sweep: baseline median / implementation median (>1: faster than baseline), from the cells
    that count only (:func:`harness.report.trust.counted`): a cell faster than the roof beside it is no speedup."""
    s = sweep(bench, "T", "median") if not bench.empty else None
    frame = None if s is None else s.frame[trust.counted(s.frame)]
    if s is None or frame is None or baseline not in set(frame["implementation"]):
        return s, pd.DataFrame(columns=["implementation", "T", "speedup"])
    base = frame[frame["implementation"] == baseline].set_index("tq")["median"]
    rows = [{"implementation": r.implementation, "T": int(r.tq), "speedup": float(base[r.tq]) / float(r.median)}
            for r in frame.itertuples() if r.tq in base.index and r.median]
    return s, pd.DataFrame(rows, columns=["implementation", "T", "speedup"])


def _noise(cells: tuple[BenchCell, ...], cpus: int | None) -> Noise:
    """Of the ok bench cells, those whose IQR/median is at least 10% (read from the typed cells' statistics), and
    why, from the load each noisy cell ran at on a machine of ``cpus``."""
    ok = [c for c in cells if c.status == Status.OK]
    noisy = [c for c in ok if is_noisy(c.stats or Stats())]
    return Noise(len(noisy), len(ok), noise_cause([c.load_average for c in noisy], cpus,
                                                  max((c.threads or 0 for c in noisy), default=0)))


def _cpus(results: Results) -> int | None:
    """The CPUs of the machine the bench files ran on (the largest any file records)."""
    cores = [s.environment.cores for s in results.sources if s.environment.cores]
    return max(cores) if cores else None


def analyse(results: Results, baseline: str, implementations: Mapping[str, Mapping[str, object]] | None = None) -> Analysis:
    """The whole analysis of ``results`` (``implementations``: what each declared, default the files' own)."""
    bench, verify = results.bench, results.verify
    fits = tuple(sweep_fits(bench, results.implementations if implementations is None else implementations))
    margins = tables.worst_margins(verify)
    return Analysis(results=results, baseline=baseline, fits=fits, speedup=speedup_table(bench, baseline)[1],
                    matrix=tables.correctness_matrix(verify), failures=tables.failures(verify), margins=margins,
                    noise=_noise(results.bench_cells, _cpus(results)), untrusted=tables.untrusted(bench),
                    bench_table=tables.bench_summary(bench),
                    headline=tuple(headline(results, margins)), values=value_findings(results.bench_cells),
                    set_aside=trust.set_aside(bench))
