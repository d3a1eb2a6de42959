"""`attnbench compare BASE NEW`: per-cell ratio of medians, decided only beyond the runs' noise; exit 1 on a regression."""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.cli.common import format_table, probability
from harness.errors import UsageError
from harness.report.compare import DEFAULT_ALPHA, DEFAULT_THRESHOLD, compare_files, parse_threshold
from harness.report.compare_view import HEADERS, RECOMMEND, markdown, rows
from harness.results.files import dumps

HELP = "compare two stored benchmark runs; exit 1 on a regression beyond the threshold or a newly failing cell"
DESCRIPTION = (HELP + ". Per cell: new/base ratio of medians, a regression only where the runs' own noise (IQR) and "
               "load cannot explain it; cells it cannot decide are 'not comparable' (exit 0) and `attnbench ab` "
               "decides them. Cells whose samples are rounds (the files `attnbench ab` writes) are tested with "
               "Mann-Whitney U over the rounds. Accepts attnbench result files and pytest-benchmark JSON.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("base", type=Path, metavar="BASE", help="the reference run (result file or pytest-benchmark JSON)")
    parser.add_argument("new", type=Path, metavar="NEW", help="the run to judge")
    parser.add_argument("--threshold", default=f"{DEFAULT_THRESHOLD:.0%}", metavar="PCT",
                        help="slow-down that counts as a regression, e.g. 25%% (default) or 0.1")
    parser.add_argument("--alpha", type=probability, default=DEFAULT_ALPHA,
                        help=f"significance level of the Mann-Whitney U test over rounds (default {DEFAULT_ALPHA})")
    parser.add_argument("--allow-incomplete", action="store_true",
                        help="compare a run that stopped before its last cell (\"complete\": false); refused otherwise")
    parser.add_argument("--allow-missing", action="store_true",
                        help="compare the cells in common when NEW lacks cells BASE measured; refused otherwise")
    parser.add_argument("--json", action="store_true", help="print JSON for machines instead of a table")
    parser.add_argument("--markdown", type=Path, metavar="FILE",
                        help="also write a GitHub-flavoured Markdown summary to FILE (e.g. $GITHUB_STEP_SUMMARY)")


def run(args: argparse.Namespace) -> int:
    result = compare_files(args.base, args.new, parse_threshold(args.threshold), args.alpha,
                           allow_incomplete=args.allow_incomplete, allow_missing=args.allow_missing)
    if args.markdown:
        try:
            args.markdown.parent.mkdir(parents=True, exist_ok=True)
            args.markdown.write_text(markdown(result), encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"--markdown {args.markdown}: cannot write it ({exc.strerror or exc}); "
                             "give a writable file path") from None
    regs, imps = result.regressions, result.improvements
    if args.json:
        print(dumps(result.as_dict(), indent=2))
        return 1 if result.failed else 0
    for warning in result.warnings:
        print(f"warning: {warning}")
    compared = sum(c.ratio is not None for c in result.cells)
    t = f"{result.threshold:.0%}"
    for title, cells in (("Regressions", regs), ("Newly failing (measured in BASE)", result.newly_failing),
                         ("Not comparable (the runs' noise or load cannot decide)", result.undecided),
                         ("Improvements", imps)):
        if cells:
            print(f"\n{title} (threshold {t}):")
            print(format_table(HEADERS, rows(cells)))
    failing = f", {len(result.newly_failing)} newly failing" if result.newly_failing else ""
    undecided = f", {len(result.undecided)} not comparable" if result.undecided else ""
    print(f"\n{compared} cells compared: {len(regs)} regression(s), {len(imps)} improvement(s) beyond {t}"
          f"{failing}{undecided}.")
    if result.undecided:
        print(RECOMMEND)
    return 1 if result.failed else 0
