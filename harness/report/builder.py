"""Build a report directory from result files: tables, plots, ``index.html`` and ``summary.md``.

Layout of ``<out>/``: ``index.html`` (self-contained), ``summary.md``, ``plots/*.png``, and
CSV tables (``bench.csv``, ``verify.csv``, ``correctness.csv``, ``complexity.csv``,
``speedup.csv``). Only result files are read; no implementation is imported or run.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from harness.errors import UsageError
from harness.report import DEFAULT_BASELINE, html, markdown, plots, structure_plots, tables
from harness.report.complexity import MEMORY, TOLERANCE, complexity_table
from harness.report.headline import Line, headline
from harness.report.load import Results, load


@dataclass
class Report:
    name: str
    out: Path
    results: Results
    baseline: str
    complexity: pd.DataFrame
    matrix: pd.DataFrame
    failures: pd.DataFrame
    speedup: pd.DataFrame
    bench_table: pd.DataFrame
    plots: list[plots.Plot] = field(default_factory=list)
    csvs: list[Path] = field(default_factory=list)
    tolerance: float = TOLERANCE
    headline: list[Line] = field(default_factory=list)

    @property
    def sources(self) -> list[dict[str, Any]]:
        return self.results.sources

    @property
    def problem_count(self) -> int:
        verify = self.results.verify
        return 0 if verify.empty else int(verify["status"].isin(tables.PROBLEMS).sum())

    @property
    def noisy_cells(self) -> tuple[int, int]:
        """(timed cells with IQR/median >= 10%, timed cells): how far to trust small differences."""
        from harness.analysis.stats import NOISY_IQR_OVER_MEDIAN

        bench = self.results.bench
        if bench.empty:
            return 0, 0
        ok = bench[bench["status"] == "ok"]
        spread = pd.to_numeric(ok["iqr_over_median"], errors="coerce")
        return int((spread >= NOISY_IQR_OVER_MEDIAN).sum()), len(ok)

    @property
    def noise_note(self) -> str:
        noisy, timed = self.noisy_cells
        if not noisy:
            return ""
        return (f"{noisy} of {timed} timed cells are noisy (IQR/median >= 10%): the machine was busy; "
                "fitted exponents and speedups from those cells are rough")

    @property
    def index(self) -> Path:
        return self.out / "index.html"

    @property
    def summary(self) -> Path:
        return self.out / "summary.md"


def build_report(paths: Iterable[Path], out: Path, baseline: str = DEFAULT_BASELINE) -> Report:
    """Read ``paths`` and write the whole report under ``out``; returns what was written."""
    out = Path(out)
    results = load(paths)
    _writable_directory(out)
    bench, verify = results.bench, results.verify
    rows = complexity_table(bench, results.implementations)
    matrix = tables.correctness_matrix(verify)
    _, speedup = plots.speedup_frame(bench, baseline) if not bench.empty else (None, pd.DataFrame())
    report = Report(name=out.name, out=out, results=results, baseline=baseline,
                    complexity=tables.complexity_frame(rows), matrix=matrix, failures=tables.failures(verify),
                    speedup=speedup, bench_table=tables.bench_summary(bench), headline=headline(results))
    plot_dir = out / "plots"
    for name in (*plots.PLOT_NAMES, *structure_plots.STRUCTURE_PLOT_NAMES):  # no stale figure when written again
        (plot_dir / f"{name}.png").unlink(missing_ok=True)
    if not bench.empty:
        candidates = [plots.scaling_plot(bench, plot_dir, "T"), plots.scaling_plot(bench, plot_dir, "T", MEMORY),
                      plots.scaling_plot(bench, plot_dir, "d"), plots.scaling_plot(bench, plot_dir, "heads"),
                      plots.throughput_plot(bench, plot_dir, results.peaks), plots.speedup_plot(bench, plot_dir, baseline),
                      plots.scaling_plot(bench, plot_dir, "Tk"),
                      plots.roofline_plot(bench, plot_dir, results.peaks, results.bandwidth)]
        candidates += [structure_plots.window_vs_T_plot(bench, plot_dir), structure_plots.window_width_plot(bench, plot_dir)]
        report.plots += [p for p in candidates if p is not None]
        if not report.plots:  # no sweep at all (e.g. pytest-benchmark's shape set): one bar chart instead
            fallback = plots.per_case_plot(bench, plot_dir)
            report.plots += [fallback] if fallback is not None else []
    growth = plots.error_growth_plot(results.growth, plot_dir)
    report.plots += [growth] if growth is not None else []
    correctness = plots.correctness_plot(matrix, plot_dir)
    if correctness is not None:
        report.plots.append(correctness)
    report.csvs = tables.write_csvs(out, {
        "bench": report.bench_table, "verify": verify,
        "correctness": tables.correctness_long(matrix) if not matrix.empty else pd.DataFrame(),
        "complexity": report.complexity, "speedup": speedup,
    })
    out.mkdir(parents=True, exist_ok=True)
    _write_text(report.index, html.render(report))
    _write_text(report.summary, markdown.render(report))
    return report


def _writable_directory(out: Path) -> None:
    """Make ``out`` (a directory) or say, before any plot is drawn, why it cannot hold the report."""
    if out.exists() and not out.is_dir():
        raise UsageError(f"the report directory {out} is a file; give a directory path (it is created if missing)")
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as exc:
        raise UsageError(f"cannot write the report to {out} ({exc.strerror or exc}); give a writable directory") from None


def _write_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
