"""`attnbench report RESULTS...`: index.html, summary.md, plots and CSV tables from result files."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from harness.report.settings import DEFAULT_BASELINE, ReportSettings

HELP = "write an HTML + Markdown report (plots, complexity table, correctness matrix) from result files"
DESCRIPTION = (HELP + ". Reads attnbench result files (results/*.json) and pytest-benchmark JSON; "
               "never runs an implementation.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("results", nargs="+", type=Path, metavar="RESULTS",
                        help="attnbench result files and/or pytest-benchmark --benchmark-json files")
    parser.add_argument("--out", type=Path, default=None, metavar="DIR",
                        help=f"report directory (default: {REPORTS_DIR}/<run id of the last file>)")
    parser.add_argument("--baseline", default=DEFAULT_BASELINE, metavar="NAME",
                        help=f"implementation the speedup plot divides by (default: {DEFAULT_BASELINE})")
    parser.add_argument("--history", action="store_true",
                        help="RESULTS are bench files from successive commits: write history.html, history.md, "
                             "history.csv and plots/history.png (each cell's median per commit, detected steps "
                             "marked with the commit and the ratio) instead of a report")


REPORTS_DIR = Path("reports")
"""Where report directories go when ``--out`` is not given."""


@dataclass(frozen=True)
class ReportRequest:
    """``attnbench report`` mapped once from its flags: the library's settings, and whether the files are a
    history; ``attnbench run`` builds one too and calls :func:`execute`."""

    settings: ReportSettings
    history: bool = False


def request_from_args(args: argparse.Namespace) -> ReportRequest:
    """The command line, mapped once (the directory named after the last file unless ``--out`` is given)."""
    results = tuple(args.results)
    default = REPORTS_DIR / (f"history-{results[-1].stem}" if args.history else results[-1].stem)
    return ReportRequest(ReportSettings(results, args.out or default, args.baseline), args.history)


def run(args: argparse.Namespace) -> int:
    return execute(request_from_args(args))


def execute(request: ReportRequest) -> int:
    """Write the report (or the history) ``request`` describes and say where it is; exit status 0."""
    if request.history:
        return _history(request)
    from harness.report.builder import STAGES, build_report  # pandas, matplotlib: only when a report is built
    from harness.report.terminal import set_aside_text
    from harness.report.trust import ANCHOR
    from harness.runtime.progress import Progress

    progress = Progress(len(STAGES), title="report")  # a bar on a terminal, nothing on a pipe
    try:
        report = build_report(request.settings,
                              on_stage=lambda stage: progress.advance(stage, count=0 if stage == STAGES[0] else 1))
    finally:
        progress.close()
    flagged = report.analysis.flagged
    baseline = request.settings.baseline
    if baseline not in set(report.results.bench.get("implementation", [])) and not report.results.bench.empty:
        print(f"attnbench report: note: baseline {baseline!r} has no bench cells; no speedup plot "
              "(choose another with --baseline NAME)", file=sys.stderr)
    print(f"report: {report.index}")
    print(f"summary: {report.summary}")
    rows = report.analysis.rows
    undecided, too_few = sum(r.undecided for r in rows), sum(r.too_few for r in rows)
    print(f"{len(report.plots)} plots, {len(report.csvs)} CSV tables; "
          f"{report.problem_count} verify problem(s); {len(flagged)} exponent(s) off theory"
          + (f", {undecided} undecided" if undecided else "")
          + (f", {too_few} sweep(s) with too few points to fit" if too_few else ""))
    for row in flagged:
        assert row.fit is not None
        print(f"  {row.implementation} {row.quantity} in {row.axis}: {row.fit.describe()}, theory {row.theory:g}")
    print(set_aside_text(report.analysis.set_aside, f"{report.index}#{ANCHOR}"), end="")
    return 0


def _history(request: ReportRequest) -> int:
    from harness.report.history import history
    from harness.report.history_view import write_history

    h = history(list(request.settings.results))
    files = write_history(h, request.settings.out)
    print(f"history: {files.html}")
    print(f"summary: {files.markdown}")
    print(f"{len(h.commits)} commits, {len(h.series)} cells; {len(h.steps)} step(s)")
    for series, step in h.steps:
        print(f"  {series.name}: x{step.ratio:.2f} at {step.label}")
    return 0
