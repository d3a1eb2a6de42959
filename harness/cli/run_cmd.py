"""`attnbench run`: the main job. verify (quick), bench (quick), then a report of both.

Each step is the real command, driven through :func:`harness.cli.main`, so ``attnbench run``
does exactly what the three commands do by hand. Result files go to ``results/<run-id>-verify.json``
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
from pathlib import Path

from harness.cli import EXIT_INTERNAL, EXIT_INTERRUPTED, add_executor_arguments, add_plugin_argument, executor_from_args
from harness.cli.common import positive_int
from harness.errors import Interrupted
from harness.results import RESULTS_DIR, new_run_id

HELP = "the main job: verify --suite quick, bench --suite quick, then report; prints where the report is"
DESCRIPTION = (
    "The main job: verify --suite quick, bench --suite quick, then report on both. Result files go to "
    "results/<run-id>-verify.json and results/<run-id>-bench.json, the report to reports/<run-id>/ "
    "(index.html, summary.md, plots/, CSV). Exit status: 0 all passed; 1 verify or bench found a problem "
    "(the report is still written); 2 a step could not run (bad usage).")
REPORTS_DIR = Path("reports")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_plugin_argument(parser)
    parser.add_argument("--only", action="append", default=[], metavar="NAMES",
                        help="run only these implementations (comma-separated, repeatable)")
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR, metavar="DIR",
                        help=f"where the result files go (default: {RESULTS_DIR}/)")
    parser.add_argument("--reports-dir", type=Path, default=REPORTS_DIR, metavar="DIR",
                        help=f"where the report directory goes (default: {REPORTS_DIR}/)")
    parser.add_argument("--baseline", default=None, metavar="NAME",
                        help="implementation the report's speedups divide by (default: torch_sdpa)")
    parser.add_argument("--threads", type=positive_int, metavar="N",
                        help="threads for bench's timing (default: torch's); 1 is steadier on a busy machine")
    parser.add_argument("--skip-verify", action="store_true", help="benchmark and report only")
    parser.add_argument("--skip-bench", action="store_true", help="verify and report only")
    add_executor_arguments(parser)


def _common(args: argparse.Namespace, *, only: bool = True) -> list[str]:
    """The flags every step takes: plugins, the executor and (``only``) the implementations."""
    argv: list[str] = []
    for plugin in args.plugin:
        argv += ["--plugin", plugin]
    for names in args.only if only else ():
        argv += ["--only", names]
    if getattr(args, "executor", None):
        argv += ["--executor", args.executor]
    if getattr(args, "address", None):
        argv += ["--address", args.address]
    return argv


def _step(title: str, argv: list[str], *, quiet: bool = False) -> tuple[int, float]:
    """Run one attnbench command in this process; ``quiet`` sends its stdout to stderr. A Ctrl-C is
    EXIT_INTERRUPTED, said once by ``run`` itself (the step prints no line of its own)."""
    from harness.cli import main

    print(f"attnbench run: {title}: attnbench {' '.join(argv)}", file=sys.stderr, flush=True)
    started = time.monotonic()
    try:
        with contextlib.redirect_stdout(sys.stderr) if quiet else contextlib.nullcontext():
            code = main(argv, nested=True)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED, time.monotonic() - started
    seconds = time.monotonic() - started
    print(f"attnbench run: {title} finished in {seconds:.0f} s (exit {code})", file=sys.stderr, flush=True)
    return code, seconds


def _stop_here(step: str, verify: Path | None, bench: Path | None, args: argparse.Namespace) -> Interrupted:
    """What a Ctrl-C during ``step`` leaves, and the commands that finish the job from there."""
    have = [str(p) for p in (verify, bench) if p is not None and p.exists()]
    files = f"result files so far: {', '.join(have)}" if have else "no result file was written"
    common = " ".join(_common(args))
    threads = f" --threads {args.threads}" if args.threads else ""
    todo = []
    if step == "verify":
        todo.append(f"attnbench verify --suite quick --json {verify} {common}".rstrip())
    if step == "verify" and bench is not None:
        todo.append(f"attnbench bench --suite quick --out {bench}{threads} {common}".rstrip())
    if step == "bench":
        resume = " ".join(_common(args, only=False))  # the file never says what to load or where
        todo.append(f"attnbench bench --resume {bench} {resume}".rstrip())
    todo.append(f"attnbench report {' '.join(str(p) for p in (verify, bench) if p is not None)}")
    return Interrupted(f"{files}; to finish: {'; then '.join(todo)}")


def run(args: argparse.Namespace) -> int:
    executor_from_args(args)  # no Ray: say how to install it before any step starts
    run_id = new_run_id("run")
    results: list[Path] = []
    codes: dict[str, int] = {}
    verify_path = None if args.skip_verify else args.results_dir / f"{run_id}-verify.json"
    bench_path = None if args.skip_bench else args.results_dir / f"{run_id}-bench.json"
    if verify_path is not None:
        codes["verify"], _ = _step("verify", ["verify", "--suite", "quick", "--json", str(verify_path),
                                              *_common(args)])
        if codes["verify"] == EXIT_INTERRUPTED:
            raise _stop_here("verify", verify_path, bench_path, args)
        if verify_path.exists():
            results.append(verify_path)
    if bench_path is not None:
        threads = ["--threads", str(args.threads)] if args.threads else []
        codes["bench"], _ = _step("bench", ["bench", "--suite", "quick", "--out", str(bench_path), *threads,
                                            *_common(args)])
        if codes["bench"] == EXIT_INTERRUPTED:
            raise _stop_here("bench", verify_path, bench_path, args)
        if bench_path.exists():
            results.append(bench_path)
    if not results:
        print("attnbench run: error: no step wrote a result file; nothing to report", file=sys.stderr)
        return 2
    out = args.reports_dir / run_id
    report_argv = ["report", *map(str, results), "--out", str(out)]
    if args.baseline:
        report_argv += ["--baseline", args.baseline]
    codes["report"], _ = _step("report", report_argv, quiet=True)  # run prints where the report is, once
    if codes["report"] == EXIT_INTERRUPTED:
        raise Interrupted(f"the report in {out} is incomplete; to finish: attnbench {' '.join(report_argv)}")
    written = [path for path in (out / "index.html", out / "summary.md") if path.is_file()]
    if codes["report"] == 0 and len(written) == 2:  # never a path the report step did not write
        print(f"report: {written[0]}")
        print(f"summary: {written[1]}")
    else:
        print(f"attnbench run: no report was written (report exited {codes['report']}); the result files are "
              f"kept; to write it: attnbench {' '.join(report_argv)}", file=sys.stderr)
    for name, code in codes.items():
        if code != 0:
            print(f"attnbench run: {name} exited {code}", file=sys.stderr)
    if EXIT_INTERNAL in codes.values():
        return EXIT_INTERNAL
    if any(code not in (0, 1) for code in codes.values()):
        return 2
    return 1 if codes.get("verify") == 1 or codes.get("bench") == 1 else 0
