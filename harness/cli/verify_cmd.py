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
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from harness.cli import add_executor_arguments, add_plugin_argument, executor_from_args
from harness.cli.common import default_of, positive_int, positive_number, registry_of
from harness.cli.model_flag import LIST, add_model_argument, checked_model, print_catalogue
from harness.contract.registry import Implementation
from harness.errors import Interrupted, UsageError
from harness.report.terminal import problems, verify_table
from harness.results import Run, new_run_id
from harness.results.files import dumps
from harness.runtime.isolation import start_forkserver
from harness.verify.runner import wall_clock
from harness.verify.suites import SUITES

if TYPE_CHECKING:
    from harness.verify.session import VerifySettings

HELP = "check implementations against the float64 oracle (outputs, gradients, properties)"
DESCRIPTION = __doc__


def _default(name: str) -> object:
    from harness.verify.session import VerifySettings

    return default_of(VerifySettings, name)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_plugin_argument(parser)
    parser.add_argument("--only", action="append", default=[], metavar="NAMES",
                        help="verify only these implementations (comma-separated, repeatable)")
    parser.add_argument("--suite", choices=SUITES, default=_default("suite"),
                        help="small: T <= 64 (slow implementations); quick: every feature, about a minute "
                             f"for all built-ins; full: the whole case matrix (default: {_default('suite')})")
    parser.add_argument("--json", metavar="FILE",
                        help="write the result file here instead of results/<run-id>.json; '-' prints it to stdout")
    parser.add_argument("--force", action="store_true",
                        help="let --json replace an existing file that is not a verify result file")
    parser.add_argument("--timeout", type=positive_number, default=_default("timeout_s"), metavar="S",
                        help=f"seconds one case may take before its worker is killed (default {_default('timeout_s'):g})")
    parser.add_argument("--trials", type=positive_int, default=_default("trials"), metavar="N",
                        help=f"seeded trials per case, fresh inputs each (default {_default('trials')})")
    parser.add_argument("--maxfail", type=positive_int, metavar="N",
                        help="stop verifying an implementation after its N-th failing case (as pytest's --maxfail): "
                             "its other cases are recorded as skipped, not run (default: every case runs)")
    parser.add_argument("--fuzz", type=positive_int, metavar="N",
                        help="instead of a suite: search N random cases inside each implementation's declared "
                             "capabilities (Hypothesis), shrink the first failure and print it as a Python reproducer")
    parser.add_argument("--fuzz-seed", type=int, default=_default("fuzz_seed"), metavar="S",
                        help=f"the search's seed (default {_default('fuzz_seed')}); its example database is "
                             "results/.hypothesis")
    parser.add_argument("--jobs", type=positive_int, default=_default("jobs"), metavar="N",
                        help=f"implementations verified at the same time, each in its own worker (default "
                             f"{_default('jobs')}; with --executor ray the cluster's CPUs decide)")
    add_model_argument(parser, "check")
    parser.add_argument("--workload", nargs="+", metavar="SPEC",
                        help="check serving batches instead of the suite's cases, each one call of packed requests "
                             "with bottom-right causal masking, per request against float64: vLLM's grammar "
                             "(2q2k_32q1s1k, spec4s1k, chunk512q4k) or a JSON trace (docs/serving.md)")
    add_executor_arguments(parser)


@dataclass(frozen=True)
class VerifyRequest:
    """``attnbench verify`` mapped once from its flags: the library's settings, the result file, how to report.

    ``attnbench run`` builds one too (:func:`request_for`) and calls :func:`execute`.
    """

    settings: VerifySettings
    out: Path
    to_stdout: bool = False
    """``--json -``: ``out`` is a temporary file, printed and removed when the run ends."""
    force: bool = False


def request_for(settings: VerifySettings, json: str | None = None, *, force: bool = False) -> VerifyRequest:
    """Where the result file goes (``json``: ``--json``'s value) and the fuzz database beside it."""
    from harness.verify.fuzz import DATABASE_DIR
    from harness.verify.session import default_out

    to_stdout = json == "-"
    if to_stdout:
        out = Path(tempfile.mkdtemp(prefix="attnbench-")) / f"{new_run_id('verify')}.json"
    else:
        out = Path(json) if json else default_out()
    database = out.parent / ".hypothesis" if json and not to_stdout else DATABASE_DIR
    return VerifyRequest(replace(settings, fuzz_database=database), out, to_stdout, force)


def request_from_args(args: argparse.Namespace) -> VerifyRequest:
    """The command line, mapped once."""
    from harness.verify.session import VerifySettings

    model = checked_model(args.model, "verify")
    executor, address = executor_from_args(args)
    settings = VerifySettings(
        suite=args.suite, only=tuple(args.only), plugins=tuple(args.plugin), trials=args.trials,
        timeout_s=args.timeout, jobs=args.jobs, maxfail=args.maxfail, fuzz=args.fuzz or None, fuzz_seed=args.fuzz_seed,
        executor=executor, address=address, model=model, workload=tuple(args.workload or ()))
    return request_for(settings, args.json, force=args.force)


def run(args: argparse.Namespace) -> int:
    if args.model == LIST:
        if args.json not in (None, "-"):
            raise UsageError(f"--model list prints the catalogue and writes no result file; for it as JSON give "
                             f"--json - (stdout), not --json {args.json}")
        return print_catalogue(args.json is not None)
    return execute(request_from_args(args))


def execute(request: VerifyRequest) -> int:
    """Run the verify ``request`` describes and print its verdicts; the exit status (1: a problem found)."""
    from harness.results import check_out
    from harness.verify import run as run_verify

    settings, path = request.settings, request.out
    if not request.to_stdout:  # a bad --json costs a second, not the plugins' start-up
        check_out(path, "verify", force=request.force)
    try:
        start_forkserver(from_here=True)  # before the plugins load: the server may be this process, forked
        registry = registry_of(settings.plugins)
        started = wall_clock()
        result = run_verify(settings, path, force=request.force, registry=registry)
    except BaseException as exc:
        if not request.to_stdout:
            raise
        shutil.rmtree(path.parent, ignore_errors=True)  # the temporary result file (and its lock) go with the run
        if isinstance(exc, Interrupted):
            raise Interrupted("nothing was kept (--json - prints the document only when the run ends); "
                              "run the same command again") from None
        raise
    return _present(result, wall_clock() - started, registry.select(list(settings.only)), path, request.to_stdout)


def _present(result: Run, seconds: float, impls: list[Implementation], path: Path, to_stdout: bool) -> int:
    cells = result.verify_cells()
    if to_stdout:
        print(dumps(result.to_json(), indent=1))
        shutil.rmtree(path.parent, ignore_errors=True)
    else:
        notes = {i.name: i.declared.conventions.unusual() for i in impls if i.declared.conventions.unusual()}
        print(verify_table(cells, seconds, [i.name for i in impls], notes))
        print(f"attnbench verify: results in {path}", file=sys.stderr)
    return 1 if problems(cells) else 0
