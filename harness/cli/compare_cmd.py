"""`attnbench compare BASE NEW`: per cell the comparison engine's verdict, ratio, 95% interval and MDE; exit 1 on a slower cell."""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.analysis.comparison import level_note
from harness.cli.common import format_table, probability
from harness.errors import printable
from harness.report.compare import DEFAULT_ALPHA, DEFAULT_THRESHOLD, compare_files, parse_threshold
from harness.report.compare_view import HEADERS, RECOMMEND, SECTIONS, markdown, rows, summary
from harness.results.files import dumps
from harness.results.paths import check_output, starts_with, write_atomic

HELP = "compare two stored benchmark runs; exit 1 on a cell decided slower beyond the threshold or a newly failing cell"
DESCRIPTION = (HELP + ". Per cell the comparison engine gives a verdict (slower, faster, unchanged or undecided), the "
               "ratio new/base with its 95% interval, and the cell's minimum detectable effect (MDE). The two sides of "
               "one `attnbench ab` run are paired round by round (the same verdicts as ab); separate runs are judged on "
               "their ratio of medians, the interval widened by the runs' own noise and, on the wall clock only, "
               "their load. Accepts attnbench result files and pytest-benchmark JSON (pytest --benchmark-json).")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("base", type=Path, metavar="BASE", help="the reference run (result file or pytest-benchmark JSON)")
    parser.add_argument("new", type=Path, metavar="NEW", help="the run to judge")
    parser.add_argument("--threshold", default=f"{DEFAULT_THRESHOLD:.0%}", metavar="PCT",
                        help=f"slow-down that counts, e.g. {DEFAULT_THRESHOLD:.0%}% (default) or 0.25")
    parser.add_argument("--alpha", type=probability, default=DEFAULT_ALPHA,
                        help=f"1 - the intervals' joint level (default {DEFAULT_ALPHA}: 95%% intervals); the "
                             "false-alarm rate is at most alpha/2")
    parser.add_argument("--allow-incomplete", action="store_true",
                        help="compare a run that stopped before its last cell (\"complete\": false); refused otherwise")
    parser.add_argument("--allow-missing", action="store_true",
                        help="compare the cells in common when NEW lacks cells BASE measured; refused otherwise")
    parser.add_argument("--json", action="store_true", help="print JSON for machines instead of a table")
    parser.add_argument("--markdown", type=Path, metavar="FILE",
                        help="also write a GitHub-flavoured Markdown summary to FILE (e.g. $GITHUB_STEP_SUMMARY)")


MARKDOWN_TITLE = "# attnbench compare"
"""The first line of the Markdown summary: ``--markdown`` replaces only an empty file or one that starts so."""


def run(args: argparse.Namespace) -> int:
    threshold = parse_threshold(args.threshold)
    if args.markdown:
        check_output(args.markdown, flag="--markdown", inputs=(args.base, args.new),
                     kind="a Markdown summary of attnbench compare", ours=starts_with(MARKDOWN_TITLE.encode()))
    result = compare_files(args.base, args.new, threshold, args.alpha,
                           allow_incomplete=args.allow_incomplete, allow_missing=args.allow_missing)
    if args.markdown:
        write_atomic(args.markdown, markdown(result), flag="--markdown")
    if args.json:
        print(dumps(result.as_dict(), indent=2))
        return 1 if result.failed else 0
    for warning in result.warnings:
        print(f"warning: {printable(warning)}")
    t = f"{result.threshold:.0%}"
    for title, attr in SECTIONS:
        cells = getattr(result, attr)
        if cells:
            print(f"\n{title} (threshold {t}):")
            print(format_table(HEADERS, rows(cells)))
    print(f"\n{summary(result)}")
    if result.compared:
        print(level_note(result.alpha, result.compared))
    if any(c.method == "separate runs" for c in result.undecided):
        print(RECOMMEND)
    return 1 if result.failed else 0
