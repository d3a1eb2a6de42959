"""`attnbench run`: the main job. verify (quick), bench (quick), then a report of both.

Each step is the real command's :func:`execute` on a request ``run`` maps from its own flags once
(the same records ``verify``, ``bench`` and ``report`` map theirs into), so ``attnbench run`` does exactly
what the three commands do by hand, with no command line rebuilt and parsed again. Result files go to ``results/<run-id>-verify.json``
and ``results/<run-id>-bench.json``, the report to ``reports/<run-id>/``. A verify failure does
not stop the run: the report is the place to see it. The exit status is 1 when verify or bench
found a problem (a failing case; a cell that errored, crashed or timed out), 2 when a step could
not run at all (bad usage), else 0.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Callable
from pathlib import Path

from harness.cli import (
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    Step,
    add_executor_arguments,
    add_plugin_argument,
    bench_cmd,
    executor_from_args,
    report_cmd,
    verify_cmd,
)
from harness.cli.common import positive_int
from harness.errors import Interrupted
from harness.report.settings import DEFAULT_BASELINE, ReportSettings
from harness.results import RESULTS_DIR, new_run_id
from harness.runtime.isolation import start_forkserver

HELP = "the main job: verify --suite quick, bench --suite quick, then report; prints where the report is"
DESCRIPTION = (
    "The main job: verify --suite quick, bench --suite quick, then report on both. Result files go to "
    "results/<run-id>-verify.json and results/<run-id>-bench.json, the report to reports/<run-id>/ "
    "(index.html, summary.md, plots/, CSV). Exit status: 0 all passed; 1 verify or bench found a problem "
    "(the report is still written); 2 a step could not run (bad usage).")
SUITE = "quick"
"""The suite both verify and bench run."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_plugin_argument(parser)
    parser.add_argument("--only", action="append", default=[], metavar="NAMES",
                        help="run only these implementations (comma-separated, repeatable)")
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR, metavar="DIR",
                        help=f"where the result files go (default: {RESULTS_DIR}/)")
    parser.add_argument("--reports-dir", type=Path, default=report_cmd.REPORTS_DIR, metavar="DIR",
                        help=f"where the report directory goes (default: {report_cmd.REPORTS_DIR}/)")
    parser.add_argument("--baseline", default=DEFAULT_BASELINE, metavar="NAME",
                        help=f"implementation the report's speedups divide by (default: {DEFAULT_BASELINE})")
    parser.add_argument("--threads", type=positive_int, metavar="N",
                        help="threads for bench's timing (default: torch's); 1 is steadier on a busy machine")
    parser.add_argument("--skip-verify", action="store_true", help="benchmark and report only")
    parser.add_argument("--skip-bench", action="store_true", help="verify and report only")
    add_executor_arguments(parser)


def _common(args: argparse.Namespace, *, only: bool = True) -> list[str]:
    """The flags every step shares, as the user would type them: for the lines that say what a step runs and
    how to finish a stopped run (printed, never parsed)."""
    argv: list[str] = []
    for plugin in args.plugin:
        argv += ["--plugin", plugin]
    for names in args.only if only else ():
        argv += ["--only", names]
    if args.executor:
        argv += ["--executor", args.executor]
    if args.address:
        argv += ["--address", args.address]
    return argv


def _verify_line(args: argparse.Namespace, out: Path | None) -> str:
    """The verify command that does this run's verify step by hand."""
    return " ".join(["verify", "--suite", SUITE, "--json", str(out), *_common(args)])


def _bench_line(args: argparse.Namespace, out: Path | None) -> str:
    """The bench command that does this run's bench step by hand."""
    threads = ["--threads", str(args.threads)] if args.threads else []
    return " ".join(["bench", "--suite", SUITE, "--out", str(out), *threads, *_common(args)])


def _step(name: str, shown: str, call: Callable[[], int], *, quiet: bool = False) -> int:
    """Run one step (``call``: a command's ``execute``) as that command would run; ``quiet`` sends its stdout
    to stderr. ``shown`` is the command line that does the same by hand. A Ctrl-C is EXIT_INTERRUPTED, said once
    by ``run`` itself (the step prints no line of its own)."""
    print(f"attnbench run: {name}: attnbench {shown}", file=sys.stderr, flush=True)
    started = time.monotonic()
    try:
        with contextlib.redirect_stdout(sys.stderr) if quiet else contextlib.nullcontext():
            code = Step(f"attnbench {name}", nested=True).exit_status(call)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    print(f"attnbench run: {name} finished in {time.monotonic() - started:.0f} s (exit {code})", file=sys.stderr,
          flush=True)
    return code


def _stop_here(step: str, verify: Path | None, bench: Path | None, args: argparse.Namespace) -> Interrupted:
    """What a Ctrl-C during ``step`` leaves, and the commands that finish the job from there."""
    have = [str(p) for p in (verify, bench) if p is not None and p.exists()]
    files = f"result files so far: {', '.join(have)}" if have else "no result file was written"
    todo = []
    if step == "verify":
        todo.append(f"attnbench {_verify_line(args, verify)}")
    if step == "verify" and bench is not None:
        todo.append(f"attnbench {_bench_line(args, bench)}")
    if step == "bench":
        resume = " ".join(_common(args, only=False))  # the file never says what to load or where
        todo.append(f"attnbench bench --resume {bench} {resume}".rstrip())
    todo.append(f"attnbench report {' '.join(str(p) for p in (verify, bench) if p is not None)}")
    return Interrupted(f"{files}; to finish: {'; then '.join(todo)}")


def run(args: argparse.Namespace) -> int:
    executor, address = executor_from_args(args)  # no Ray: say how to install it before any step starts
    run_id = new_run_id("run")
    codes: dict[str, int] = {}
    verify_path = None if args.skip_verify else args.results_dir / f"{run_id}-verify.json"
    bench_path = None if args.skip_bench else args.results_dir / f"{run_id}-bench.json"
    if verify_path is not None:
        codes["verify"] = _verify_step(args, verify_path, bench_path, executor, address)
    if bench_path is not None:
        codes["bench"] = _bench_step(args, verify_path, bench_path, executor, address)
    results = [path for path in (verify_path, bench_path) if path is not None and path.exists()]
    if not results:
        print("attnbench run: error: no step wrote a result file; nothing to report", file=sys.stderr)
        return 2
    codes["report"] = _report_step(args, args.reports_dir / run_id, results)
    for name, code in codes.items():
        if code != 0:
            print(f"attnbench run: {name} exited {code}", file=sys.stderr)
    return _exit_status(codes)


def _verify_step(args: argparse.Namespace, verify_path: Path, bench_path: Path | None, executor: str,
                 address: str | None) -> int:
    """verify --suite quick into ``verify_path``; a Ctrl-C stops the run, saying how to finish it."""
    from harness.verify import VerifySettings

    checks = verify_cmd.request_for(VerifySettings(suite=SUITE, only=tuple(args.only), plugins=tuple(args.plugin),
                                                   executor=executor, address=address), str(verify_path))
    if bench_path is not None:  # bench follows: one server for both, its heaps on huge pages (isolation.HUGE_PAGE_HEAPS)
        start_forkserver(from_here=True, huge_pages=True)
    code = _step("verify", _verify_line(args, verify_path), lambda: verify_cmd.execute(checks))
    if code == EXIT_INTERRUPTED:
        raise _stop_here("verify", verify_path, bench_path, args)
    return code


def _bench_step(args: argparse.Namespace, verify_path: Path | None, bench_path: Path, executor: str,
                address: str | None) -> int:
    """bench --suite quick into ``bench_path``; a Ctrl-C stops the run, saying how to finish it."""
    def bench() -> int:  # its settings need torch (threads): mapped inside the step, as bench maps its own
        settings = bench_cmd.settings_for(SUITE, only=args.only, plugins=args.plugin, threads=args.threads,
                                          executor=executor, address=address)
        return bench_cmd.execute(bench_cmd.BenchRequest(settings, bench_path))

    code = _step("bench", _bench_line(args, bench_path), bench)
    if code == EXIT_INTERRUPTED:
        raise _stop_here("bench", verify_path, bench_path, args)
    return code


def _report_step(args: argparse.Namespace, out: Path, results: list[Path]) -> int:
    """The report of ``results`` into ``out``; says where it is only when the step wrote both pages."""
    report = report_cmd.ReportRequest(ReportSettings(tuple(results), out, args.baseline))
    shown = " ".join(["report", *map(str, results), "--out", str(out),
                      *(["--baseline", args.baseline] if args.baseline != DEFAULT_BASELINE else [])])
    code = _step("report", shown, lambda: report_cmd.execute(report), quiet=True)  # run says where, once
    if code == EXIT_INTERRUPTED:
        raise Interrupted(f"the report in {out} is incomplete; to finish: attnbench {shown}")
    written = [path for path in (out / "index.html", out / "summary.md") if path.is_file()]
    if code == 0 and len(written) == 2:  # never a path the report step did not write
        print(f"report: {written[0]}")
        print(f"summary: {written[1]}")
    else:
        print(f"attnbench run: no report was written (report exited {code}); the result files are "
              f"kept; to write it: attnbench {shown}", file=sys.stderr)
    return code


def _exit_status(codes: dict[str, int]) -> int:
    """The run's exit status from its steps': an internal bug in any wins, then a step that could not run (2),
    then a problem verify or bench found (1)."""
    if EXIT_INTERNAL in codes.values():
        return EXIT_INTERNAL
    if any(code not in (0, 1) for code in codes.values()):
        return 2
    return 1 if codes.get("verify") == 1 or codes.get("bench") == 1 else 0
