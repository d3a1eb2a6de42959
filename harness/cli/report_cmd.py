"""`attnbench report RESULTS...`: index.html, summary.md, plots and CSV tables from result files."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.report import DEFAULT_BASELINE

HELP = "write an HTML + Markdown report (plots, complexity table, correctness matrix) from result files"
DESCRIPTION = (HELP + ". Reads attnbench result files (results/*.json) and pytest-benchmark JSON; "
               "never runs an implementation.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("results", nargs="+", type=Path, metavar="RESULTS",
                        help="attnbench result files and/or pytest-benchmark --benchmark-json files")
    parser.add_argument("--out", type=Path, default=None, metavar="DIR",
                        help="report directory (default: reports/<run id of the last file>)")
    parser.add_argument("--baseline", default=DEFAULT_BASELINE, metavar="NAME",
                        help=f"implementation the speedup plot divides by (default: {DEFAULT_BASELINE})")
    parser.add_argument("--history", action="store_true",
                        help="RESULTS are bench files from successive commits: write history.html, history.md, "
                             "history.csv and plots/history.png (each cell's median per commit, detected steps "
                             "marked with the commit and the ratio) instead of a report")


def default_out(results: list[Path]) -> Path:
    return Path("reports") / results[-1].stem


def run_history(args: argparse.Namespace) -> int:
    from harness.report.history import history
    from harness.report.history_view import write_history

    out = args.out or Path("reports") / f"history-{args.results[-1].stem}"
    h = history(args.results)
    files = write_history(h, out)
    print(f"history: {files.html}")
    print(f"summary: {files.markdown}")
    print(f"{len(h.commits)} commits, {len(h.series)} cells; {len(h.steps)} step(s)")
    for series, step in h.steps:
        print(f"  {series.name}: x{step.ratio:.2f} at {step.label}")
    return 0


def run(args: argparse.Namespace) -> int:
    if args.history:
        return run_history(args)
    out = args.out or default_out(args.results)
    from harness.progress import Progress
    from harness.report.builder import STAGES, build_report  # pandas, matplotlib: only when a report is built

    progress = Progress(len(STAGES), title="report")  # a bar on a terminal, nothing on a pipe
    try:
        report = build_report(args.results, out, baseline=args.baseline,
                              on_stage=lambda stage: progress.advance(stage, count=0 if stage == STAGES[0] else 1))
    finally:
        progress.close()
    flagged = report.analysis.flagged
    if args.baseline not in set(report.results.bench.get("implementation", [])) and not report.results.bench.empty:
        print(f"attnbench report: note: baseline {args.baseline!r} has no bench cells; no speedup plot "
              "(choose another with --baseline NAME)", file=sys.stderr)
    print(f"report: {report.index}")
    print(f"summary: {report.summary}")
    print(f"{len(report.plots)} plots, {len(report.csvs)} CSV tables; "
          f"{report.problem_count} verify problem(s); {len(flagged)} exponent(s) off theory")
    for row in flagged:
        assert row.fit is not None
        print(f"  {row.implementation} {row.quantity} in {row.axis}: {row.fit.describe()}, theory {row.theory:g}")
    return 0
