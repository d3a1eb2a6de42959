"""`attnbench verify`: every selected implementation against the float64 oracle, case by case.

Prints the rule (m and floors), a summary table per implementation, then every failing
case with its numbers. The result file is always written (results/<run-id>.json, or the
path given to --json; --json - prints the document to stdout instead of the tables), cell
by cell as the run goes, so an interrupted run keeps what it measured.
Exit 0 only when nothing selected and available failed, errored, crashed or timed out.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from harness.cli import add_plugin_argument
from harness.cli.common import format_table, positive_int, positive_number, registry_from_args
from harness.isolation import DEFAULT_TIMEOUT_S
from harness.registry import Implementation
from harness.results import Run, Status, VerifyCell, new_run_id
from harness.verify.runner import (
    default_results_path,
    problems,
    summarize,
    wall_clock,
)
from harness.verify.suites import SUITES

HELP = "check implementations against the float64 oracle (outputs, gradients, properties)"
DESCRIPTION = __doc__


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_plugin_argument(parser)
    parser.add_argument("--only", action="append", default=[], metavar="NAMES",
                        help="verify only these implementations (comma-separated, repeatable)")
    parser.add_argument("--suite", choices=SUITES, default="quick",
                        help="small: T <= 64 (slow implementations); quick: every feature, about a minute "
                             "for all built-ins; full: the whole case matrix (default: quick)")
    parser.add_argument("--json", metavar="FILE",
                        help="write the result file here instead of results/<run-id>.json; '-' prints it to stdout")
    parser.add_argument("--force", action="store_true",
                        help="let --json replace an existing file that is not a verify result file")
    parser.add_argument("--timeout", type=positive_number, default=DEFAULT_TIMEOUT_S, metavar="S",
                        help=f"seconds one case may take before its worker is killed (default {DEFAULT_TIMEOUT_S:g})")
    parser.add_argument("--trials", type=positive_int, default=3, metavar="N",
                        help="seeded trials per case, fresh inputs each (default 3)")
    parser.add_argument("--fuzz", type=positive_int, metavar="N",
                        help="instead of a suite: search N random cases inside each implementation's declared "
                             "capabilities (Hypothesis), shrink the first failure and print it as a Python reproducer")
    parser.add_argument("--fuzz-seed", type=int, default=0, metavar="S",
                        help="the search's seed (default 0); its example database is results/.hypothesis")
    parser.add_argument("--jobs", type=positive_int, default=2, metavar="N",
                        help="implementations verified at the same time, each in its own worker (default 2)")


def _fmt(x: object) -> str:
    return f"{x:.3g}" if isinstance(x, float) else "-" if x is None else str(x)


def report(cells: Sequence[VerifyCell], seconds: float, order: Sequence[str] = ()) -> str:
    """The summary table, then the failing cases with their numbers, then distinct skip reasons."""
    from harness.verify.tolerance import describe_rule

    lines = [f"rule: {describe_rule()}", ""]
    rows = [(name, r["kind"], r["cases"], r["checks"], r["pass"], r["fail"], r["error"], r["crash"], r["timeout"],
             r["skipped"], f"{r['worst_ratio']:.2f}", f"{r['seconds']:.1f}")
            for name, r in summarize(cells, order).items()]
    lines.append(format_table(("implementation", "kind", "cases", "checks", "pass", "fail", "error", "crash",
                               "timeout", "skipped", "worst ratio", "seconds"), rows))
    bad = problems(cells)
    if bad:
        lines += ["", f"{len(bad)} problem(s):"]
        for c in bad:
            m = c.metrics
            numbers = "" if not m or m.get("bound") is None else (
                f" [max_abs_err {_fmt(m.get('max_abs_err'))}, bound {_fmt(m.get('bound'))}, ratio {_fmt(m.get('ratio'))}, "
                f"rel_l2 {_fmt(m.get('rel_l2'))}, base_err {_fmt(m.get('base_err'))}, worst_index {m.get('worst_index')}]")
            lines.append(f"  {c.status.value.upper():7} {c.implementation} {c.case_id} {c.check}: {c.reason}{numbers}")
    skips: dict[tuple[str, str], int] = {}
    for c in cells:
        if c.status == Status.SKIPPED:
            key = (c.implementation, c.reason or "")
            skips[key] = skips.get(key, 0) + 1
    if skips:
        lines += ["", "skipped:"]
        lines += [f"  {name}: {count} case(s): {reason}" for (name, reason), count in skips.items()]
    lines += ["", f"{len(cells)} checks in {seconds:.1f} s; " + ("all passed" if not bad else f"{len(bad)} problem(s)")]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from harness.verify import VerifySettings
    from harness.verify import run as run_verify
    from harness.verify.fuzz import DATABASE_DIR

    registry = registry_from_args(args)
    run_id = new_run_id("verify")
    to_stdout = args.json == "-"
    if to_stdout:
        path = Path(tempfile.mkdtemp(prefix="attnbench-")) / f"{run_id}.json"
    else:
        path = Path(args.json) if args.json else default_results_path(run_id)
    settings = VerifySettings(
        suite=args.suite, only=tuple(args.only), plugins=tuple(args.plugin), trials=args.trials,
        timeout_s=args.timeout, jobs=args.jobs, fuzz=args.fuzz or None, fuzz_seed=args.fuzz_seed,
        fuzz_database=path.parent / ".hypothesis" if args.json and not to_stdout else DATABASE_DIR)
    started = wall_clock()
    try:
        result = run_verify(settings, path, force=args.force, registry=registry)
    finally:
        if to_stdout and not path.exists():
            shutil.rmtree(path.parent, ignore_errors=True)
    return _present(result, wall_clock() - started, registry.select(args.only), path, to_stdout)


def _present(result: Run, seconds: float, impls: list[Implementation], path: Path, to_stdout: bool) -> int:
    cells = result.verify_cells()
    if to_stdout:
        print(json.dumps(result.to_json(), indent=1, default=str))
        shutil.rmtree(path.parent, ignore_errors=True)
    else:
        print(report(cells, seconds, [i.name for i in impls]))
        print(f"attnbench verify: results in {path}", file=sys.stderr)
    return 1 if problems(cells) else 0
