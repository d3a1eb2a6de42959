"""`attnbench verify`: every selected implementation against the float64 oracle, case by case.

Prints the rule (m and floors), a summary table per implementation, then every failing
case with its numbers. The result file is always written (results/<run-id>.json, or the
path given to --json; --json - prints the document to stdout instead of the tables), cell
by cell as the run goes, so an interrupted run keeps what it measured.
Exit 0 only when nothing selected and available failed, errored, crashed or timed out.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from harness.cli import add_executor_arguments, add_plugin_argument, executor_from_args
from harness.cli.common import positive_int, positive_number, registry_from_args
from harness.cli.model_flag import LIST, add_model_argument, checked_model, print_catalogue
from harness.errors import Interrupted
from harness.isolation import DEFAULT_TIMEOUT_S
from harness.registry import Implementation
from harness.report.terminal import problems, verify_table
from harness.results import Run, new_run_id
from harness.results.files import dumps
from harness.verify.runner import default_results_path, wall_clock
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
                        help="implementations verified at the same time, each in its own worker (default 2; "
                             "with --executor ray the cluster's CPUs decide)")
    add_model_argument(parser, "check")
    add_executor_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from harness.verify import VerifySettings
    from harness.verify import run as run_verify
    from harness.verify.fuzz import DATABASE_DIR

    if args.model == LIST:
        return print_catalogue(args.json is not None)
    model = checked_model(args.model, "verify")
    executor, address = executor_from_args(args)
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
        fuzz_database=path.parent / ".hypothesis" if args.json and not to_stdout else DATABASE_DIR,
        executor=executor, address=address, model=model)
    started = wall_clock()
    try:
        result = run_verify(settings, path, force=args.force, registry=registry)
    except BaseException as exc:
        if not to_stdout:
            raise
        shutil.rmtree(path.parent, ignore_errors=True)  # the temporary result file (and its lock) go with the run
        if isinstance(exc, Interrupted):
            raise Interrupted("nothing was kept (--json - prints the document only when the run ends); "
                              "run the same command again") from None
        raise
    return _present(result, wall_clock() - started, registry.select(args.only), path, to_stdout)


def _present(result: Run, seconds: float, impls: list[Implementation], path: Path, to_stdout: bool) -> int:
    cells = result.verify_cells()
    if to_stdout:
        print(dumps(result.to_json(), indent=1))
        shutil.rmtree(path.parent, ignore_errors=True)
    else:
        notes = {i.name: i.conventions.unusual() for i in impls if i.conventions.unusual()}
        print(verify_table(cells, seconds, [i.name for i in impls], notes))
        print(f"attnbench verify: results in {path}", file=sys.stderr)
    return 1 if problems(cells) else 0
