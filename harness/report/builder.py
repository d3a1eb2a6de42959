"""Build a report directory from result files: tables, plots, ``index.html`` and ``summary.md``.

Layout of ``<out>/``: ``index.html`` (self-contained), ``summary.md``, ``plots/*.png``, and
CSV tables (``bench.csv``, ``verify.csv``, ``correctness.csv``, ``complexity.csv``,
``speedup.csv``). Only result files are read; no implementation is imported or run.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from harness.errors import DiskFull, UsageError
from harness.report import html, markdown, plots, roofline, structure_plots, tables, verify_plots
from harness.report.findings import Analysis, analyse
from harness.report.headline import Line
from harness.report.load import Results, load
from harness.report.settings import ReportSettings
from harness.report.sources import Source
from harness.results.paths import check_directory, disk_full, is_disk_full, refuse_link, write_atomic


@dataclass(frozen=True)
class Report:
    """What :func:`build_report` wrote: the analysis it drew from, and the files."""

    name: str
    out: Path
    analysis: Analysis
    plots: tuple[plots.Plot, ...] = ()
    csvs: tuple[Path, ...] = ()

    @property
    def results(self) -> Results:
        return self.analysis.results

    @property
    def baseline(self) -> str:
        return self.analysis.baseline

    @property
    def complexity(self) -> pd.DataFrame:
        return self.analysis.complexity

    @property
    def matrix(self) -> pd.DataFrame:
        return self.analysis.matrix

    @property
    def failures(self) -> pd.DataFrame:
        return self.analysis.failures

    @property
    def speedup(self) -> pd.DataFrame:
        return self.analysis.speedup

    @property
    def bench_table(self) -> pd.DataFrame:
        return self.analysis.bench_table


    @property
    def headline(self) -> tuple[Line, ...]:
        return self.analysis.headline

    @property
    def sources(self) -> list[Source]:
        return self.results.sources

    @property
    def problem_count(self) -> int:
        return self.analysis.problem_count

    @property
    def index(self) -> Path:
        return self.out / "index.html"

    @property
    def summary(self) -> Path:
        return self.out / "summary.md"


def draw(analysis: Analysis, plot_dir: Path) -> list[plots.Plot]:
    """Every figure the analysis allows, drawn from it (no fit is made here)."""
    results, bench = analysis.results, analysis.results.bench
    drawn: list[plots.Plot | None] = []
    if not bench.empty:
        main_t = analysis.sweep_fit("time_vs_T")
        drawn += [plots.scaling_plot(f, plot_dir) for name in ("time_vs_T", "memory_vs_T", "time_vs_d", "time_vs_heads")
                  if (f := analysis.sweep_fit(name)) is not None]
        drawn += [plots.throughput_plot(bench, plot_dir, results.peaks),
                  plots.speedup_plot(analysis.speedup, plot_dir, analysis.baseline,
                                     main_t.sweep.label if main_t is not None else "", bench)]
        tk = analysis.sweep_fit("time_vs_Tk")
        drawn += [plots.scaling_plot(tk, plot_dir) if tk is not None else None,
                  roofline.roofline_plot(bench, plot_dir, results.peaks, results.bandwidth)]
        window = analysis.sweep_fit("time_vs_T_window")
        drawn += [structure_plots.window_vs_T_plot(bench, plot_dir, window) if window is not None else None,
                  structure_plots.window_width_plot(bench, plot_dir)]
        if not [p for p in drawn if p is not None]:  # no sweep at all (e.g. pytest-benchmark's shape set): bars
            drawn.append(plots.per_case_plot(bench, plot_dir))
    drawn += [verify_plots.error_growth_plot(results.growth, plot_dir), verify_plots.correctness_plot(analysis.matrix, plot_dir)]
    return [p for p in drawn if p is not None]


STAGES = ("reading the result files", "fitting the sweeps", "drawing the plots", "writing the tables and pages")


def build_report(settings: ReportSettings, on_stage: Callable[[str], None] = lambda stage: None) -> Report:
    """Read the settings' result files, analyse them once, and write the whole report under ``settings.out``;
    returns what was written. ``on_stage`` hears each of :data:`STAGES` as it starts (a long sweep takes a while
    to fit and draw)."""
    out = settings.out
    on_stage(STAGES[0])
    results = load(settings.results)
    _writable_directory(out)
    on_stage(STAGES[1])
    analysis = analyse(results, settings.baseline)
    stage: Path | None = None
    try:
        try:
            stage = Path(tempfile.mkdtemp(prefix=".partial-", dir=out))
            drawn, csvs = _write_set(analysis, out.name, stage, on_stage)
        except DiskFull as exc:  # from write_atomic: the report as a whole was not changed either
            raise exc.but(f"the report in {out} was not changed (the new one is written whole or not at all)",
                          exc.then) from None
        except OSError as exc:
            if not is_disk_full(exc):
                raise
            raise disk_full(exc, Path(exc.filename) if exc.filename else out,
                            f"the report in {out} was not changed (the new one is written whole or not at all)") from None
        return _publish(Report(name=out.name, out=stage, analysis=analysis, plots=drawn, csvs=csvs), out)
    finally:
        if stage is not None:
            shutil.rmtree(stage, ignore_errors=True)


def _write_set(analysis: Analysis, name: str, stage: Path, on_stage: Callable[[str], None]
               ) -> tuple[tuple[plots.Plot, ...], tuple[Path, ...]]:
    """Every file of the report under ``stage`` (a directory beside nothing the user sees yet)."""
    on_stage(STAGES[2])
    drawn = tuple(draw(analysis, stage / "plots"))
    on_stage(STAGES[3])
    csvs = tables.write_csvs(stage, {
        "bench": analysis.bench_table, "verify": analysis.results.verify,
        "correctness": tables.correctness_long(analysis.matrix) if not analysis.matrix.empty else pd.DataFrame(),
        "complexity": analysis.complexity, "speedup": analysis.speedup,
    })
    _write_text(stage / "index.html", html.render(analysis, name, drawn))
    _write_text(stage / "summary.md", markdown.render(analysis, name, drawn))
    return drawn, tuple(csvs)


def _publish(staged: Report, out: Path) -> Report:
    """Move a whole staged report into ``out`` (renames within one file system: they take no space, so a full
    disk cannot stop them half-way); ``index.html`` last, so a report that has its index is complete."""
    plot_dir = out / "plots"
    refuse_link(plot_dir, "--out")
    for name in (*plots.PLOT_NAMES, *structure_plots.STRUCTURE_PLOT_NAMES):  # no stale figure when written again
        (plot_dir / f"{name}.png").unlink(missing_ok=True)
    if staged.plots:
        plot_dir.mkdir(exist_ok=True)
    moved = tuple(dataclasses.replace(p, path=plot_dir / p.path.name) for p in staged.plots)
    csvs = tuple(out / c.name for c in staged.csvs)
    moves = [*((b.path, a.path) for b, a in zip(staged.plots, moved)), *zip(staged.csvs, csvs),
             (staged.out / "summary.md", out / "summary.md"), (staged.out / "index.html", out / "index.html")]
    for _, after in moves:  # every name checked before the first is replaced
        refuse_link(after, "--out")
        if after.is_dir():
            raise UsageError(f"{after} is a directory; the report writes a file there: remove it or give another --out")
    for before, after in moves:
        os.replace(before, after)
    return dataclasses.replace(staged, out=out, plots=moved, csvs=csvs)


def _writable_directory(out: Path) -> None:
    """Make ``out`` (a directory) or say, before any plot is drawn, why it cannot hold the report: it, its
    ``plots`` folder and the pages are never links (nothing is written through one)."""
    check_directory(out, "--out")
    for name in ("plots", "index.html", "summary.md"):
        refuse_link(out / name, "--out")


def _write_text(path: Path, text: str) -> None:
    write_atomic(path, text)
