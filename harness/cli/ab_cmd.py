"""`attnbench ab BASE HEAD`: time two revisions of a plugin in interleaved rounds; exit 1 on a slower cell.

BASE and HEAD are the same plugin from two checkouts (a file, or ``ROOT::MODULE``); each side is
imported from its own checkout in its own worker process. Each round times both in a random
order, a few calls each (on the worker's CPU time for CPU cells with one thread, else the wall
clock: `--clock`); per cell the verdict is the median per-round ratio head/base with a
distribution-free 95% interval, its minimum detectable effect, and one of four verdicts (slower,
faster, unchanged, undecided). Exit 1 only on a cell slower beyond ``--threshold`` whose interval
lies above 1 (or a cell the head can no longer run); the whole comparison raises a false alarm
with probability at most ``alpha / 2``.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import sys
from pathlib import Path
from typing import Any

from harness.analysis.comparison import DEFAULT_ALPHA, DEFAULT_THRESHOLD, level_note
from harness.bench.sweeps import SUITES
from harness.bench.timing import CLOCKS, auto_clock
from harness.cli.case_flags import add_case_arguments, overrides_from_args
from harness.cli.common import default_of, format_table, positive_int, positive_number, probability
from harness.errors import UsageError
from harness.report.compare import parse_threshold

HELP = "A/B: time two revisions of a plugin in interleaved rounds; exit 1 on a cell slower beyond the threshold"
DESCRIPTION = __doc__.split("\n\n")[1].replace("``", "`")


def _default(name: str) -> Any:
    from harness.bench.settings import ABSettings

    return default_of(ABSettings, name)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("base", metavar="BASE", help="the base revision's plugin: a .py file, or ROOT::MODULE")
    parser.add_argument("head", metavar="HEAD", help="the head revision's plugin (the same plugin, another checkout)")
    parser.add_argument("--only", action="append", default=[], metavar="NAMES",
                        help="only these implementations (comma-separated, repeatable; default: every kernel both declare)")
    parser.add_argument("--suite", choices=sorted(SUITES), default=_default("suite"),
                        help=f"the cases, as for bench (default {_default('suite')})")
    add_case_arguments(parser)
    parser.add_argument("--rounds", type=positive_int, default=_default("rounds"),
                        help=f"interleaved rounds per cell (default {_default('rounds')}; at least 7 for a 95%% "
                             "interval on one cell)")
    parser.add_argument("--processes", type=positive_int, metavar="N",
                        help=f"pairs of worker processes (one per side) the rounds are spread over, in equal shares "
                             f"(default {_default('processes')}, or --rounds where fewer): two processes of the same "
                             "code can differ for their whole life, so a verdict must hold in every pair")
    parser.add_argument("--calls", type=positive_int, default=_default("calls"),
                        help=f"timed calls per side per round (default {_default('calls')})")
    parser.add_argument("--threads", type=positive_int, default=_default("threads"),
                        help=f"threads for torch and BLAS (default {_default('threads')})")
    parser.add_argument("--clock", choices=CLOCKS, default="auto",
                        help="cpu: each call timed on its worker's CPU time, which other processes on the cores do "
                             "not stretch (time spent waiting, on a sleep, I/O or a GPU, is not counted); wall: "
                             "elapsed time; auto (default): cpu for CPU cells with --threads 1, else wall")
    parser.add_argument("--threshold", default=f"{DEFAULT_THRESHOLD:.0%}", metavar="PCT",
                        help=f"slow-down that counts, e.g. {DEFAULT_THRESHOLD:.0%}% (default) or 0.25")
    parser.add_argument("--alpha", type=probability, default=DEFAULT_ALPHA,
                        help=f"1 - the intervals' joint level (default {DEFAULT_ALPHA}: 95%% intervals); the false-alarm rate is at "
                             "most alpha/2")
    parser.add_argument("--timeout", type=positive_number, default=_default("timeout_s"), metavar="S",
                        help=f"per-task timeout (default {_default('timeout_s'):g})")
    parser.add_argument("--out", type=Path, metavar="DIR",
                        help="write bench.json (the bench run both sides were timed in: every call's time) and "
                             "base.json and head.json (each side's fastest call per round, for compare and report "
                             "--history) here (default results/ab-<time>)")
    parser.add_argument("--markdown", type=Path, metavar="FILE",
                        help="also write the Markdown summary to FILE (e.g. $GITHUB_STEP_SUMMARY)")
    parser.add_argument("--json", metavar="FILE|-", help="write the verdict as JSON to FILE, or to stdout with -")
    parser.add_argument("--quiet", action="store_true", help="no progress output")


def _check_source(spec: str, side: str) -> str:
    from harness.contract.discovery import ROOTED, absolute_specs

    if ROOTED in spec and not spec.endswith(".py"):
        root = spec.partition(ROOTED)[0]
        if not Path(root).is_dir():
            raise UsageError(f"{side} {spec}: {root} is not a folder; write ROOT::MODULE with ROOT a checkout")
    elif (spec.endswith(".py") or "/" in spec) and not Path(spec).is_file():
        raise UsageError(f"{side} {spec}: no such file; give the plugin file of each checkout (or ROOT::MODULE)")
    return absolute_specs([spec])[0]


def settings_from_args(args: argparse.Namespace) -> Any:
    from harness.bench.settings import ABSettings

    if args.clock == "cpu" and args.device != "cpu":
        raise UsageError("--clock cpu times CPU work; a CUDA kernel runs on the device: use --clock wall")
    clock = auto_clock(args.clock, args.device, args.threads)
    processes = args.processes or min(_default("processes"), args.rounds)
    if processes > args.rounds:
        raise UsageError(f"--processes {processes} is more than --rounds {args.rounds}: each pair of worker "
                         "processes needs a round of its own; raise --rounds or lower --processes")
    return ABSettings(base=_check_source(args.base, "BASE"), head=_check_source(args.head, "HEAD"),
                      suite=args.suite, overrides=overrides_from_args(args), only=list(args.only), rounds=args.rounds,
                      processes=processes, calls=args.calls, threads=args.threads, device=args.device, timeout_s=args.timeout,
                      clock=clock)


MARKDOWN_TITLE = "# attnbench ab"
"""The first line of ab's Markdown summary: ``--markdown`` replaces only an empty file or one that starts so."""


def _is_verdict(path: Path) -> bool:
    """Whether ``path`` holds an ab verdict (what ``--json FILE`` writes): the one kind of file it replaces."""
    from harness.results.paths import parse_json, read_text

    try:
        data = parse_json(read_text(path), path)
    except (UsageError, OSError):
        return False
    return isinstance(data, dict) and {"base", "head", "cells", "false_alarm_bound"} <= set(data)


def _is_bench_result(path: Path) -> bool:
    from harness.results import refuse_to_overwrite

    try:
        refuse_to_overwrite(path, "bench")
    except UsageError:
        return False
    return True


def check_outputs(args: argparse.Namespace, out: Path) -> None:
    """Every output flag, before any round is timed: never an input (the plugin files), a link, or a file of
    another kind; each in a writable place."""
    from harness.results.paths import check_output, refuse_link, starts_with

    inputs = [Path(spec) for spec in (args.base, args.head) if Path(spec).is_file()]
    refuse_link(out, "--out")
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is a file, not a directory; give a directory (it is created if missing)")
    for side in ("bench", "base", "head"):
        check_output(out / f"{side}.json", flag="--out", inputs=inputs, kind="an attnbench bench result file",
                     ours=_is_bench_result)
    if args.markdown:
        check_output(args.markdown, flag="--markdown", inputs=inputs, kind="a Markdown summary of attnbench ab",
                     ours=starts_with(MARKDOWN_TITLE.encode()))
    if args.json and args.json != "-":
        check_output(Path(args.json), flag="--json", inputs=inputs, kind="an attnbench ab verdict (JSON)",
                     ours=_is_verdict)


def run(args: argparse.Namespace) -> int:
    from harness.contract.discovery import only_names

    threshold = parse_threshold(args.threshold)
    settings = settings_from_args(args)
    only_names(args.only)
    out = args.out or Path("results") / f"ab-{_dt.datetime.now().strftime('%Y%m%d-%H%M%S')}"
    check_outputs(args, out)
    from harness.errors import Interrupted
    from harness.results.paths import write_atomic
    from harness.runtime import interrupts
    interrupts.import_torch()
    from harness.runtime.isolation import start_forkserver

    start_forkserver(from_here=True, huge_pages=True)  # timing workers' heaps on huge pages (isolation.HUGE_PAGE_HEAPS)
    from harness.bench.ab import run_ab
    from harness.bench.ab_files import write_sides
    from harness.report.ab import HEADERS, judge, markdown, rows, summary_line

    quiet = args.quiet or not sys.stderr.isatty()

    def on_cell(cell: Any) -> None:
        if not quiet:
            told = f"{cell.median * 1e3:.4g} ms" if cell.status == "ok" and cell.median else f"{cell.status}: {cell.reason}"
            print(f"ab: {cell.implementation} {cell.case_id} {cell.mode}: {told}", file=sys.stderr)

    try:
        result_run = run_ab(settings, out / "bench.json", on_cell)
    except KeyboardInterrupt:  # bench's own Interrupted too: its --resume does not finish an A/B comparison
        raise Interrupted(f"the cells measured so far are kept in {out / 'bench.json'}; ab writes "
                          f"{out / 'base.json'} and {out / 'head.json'} after its last round: run the same command "
                          "again") from None
    files = write_sides(result_run, out)
    result = judge(result_run, threshold, args.alpha)
    document = {**result.as_dict(), "files": {"bench": str(out / "bench.json"),
                                              **{side: str(p) for side, p in files.items()}}}
    if args.markdown:
        write_atomic(args.markdown, markdown(result), flag="--markdown")
    if args.json and args.json != "-":
        from harness.results.files import encode_json

        write_atomic(Path(args.json), encode_json(document), flag="--json")
    if args.json == "-":
        print(json.dumps(document, indent=2))
    else:
        print(format_table(HEADERS, rows(result.cells)))
        print(f"\n{summary_line(result)}")
        print(level_note(result.alpha, sum(c.ratio is not None for c in result.cells)))
        print(f"results: {out / 'bench.json'} {files['base']} {files['head']}")
    return 1 if result.failed else 0
