"""`attnbench bench`: time, FLOP/s against the measured GEMM peak, peak memory and scaling fits.

Every cell runs in a worker process with a timeout; cells are written to the result file
(default ``results/<run-id>.json``) as they finish, so an interrupted run can be finished
with ``--resume FILE``. Timings on a shared machine are noisy: compare implementations by
the ratios within one run, and heed the IQR/median warnings.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import sys
from pathlib import Path
from typing import Any

from harness import interrupts
from harness.analysis.scaling import OVERHEAD_RULE
from harness.analysis.stats import NOISY_IQR_OVER_MEDIAN, is_noisy
from harness.bench.catalogue import load_catalogue
from harness.bench.sweeps import (
    SUITE_CELL_BUDGET_S,
    SUITE_TIMING,
    SUITES,
    free_memory_bytes,
)
from harness.bench.timing import CLOCKS, auto_clock
from harness.cli import add_executor_arguments, add_plugin_argument, executor_from_args
from harness.cli.common import positive_int, positive_number, registry_from_args
from harness.cli.model_flag import LIST, add_model_argument, checked_model, print_catalogue
from harness.dtypes import DTYPES
from harness.errors import UsageError
from harness.flops import MODES
from harness.progress import Progress
from harness.report.terminal import fits_table, format_seconds, results_table
from harness.results import RESULTS_DIR, BenchCell, Run, Status, new_run_id
from harness.results.files import dumps
from harness.results.schema import INTEGRITY

HELP = "time implementations: median, spread, GFLOP/s, % of the GEMM peak, peak memory, scaling fits"
DESCRIPTION = __doc__.split("\n\n")[0] + "\n\n" + __doc__.split("\n\n")[1]


def _ints(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of integers (e.g. 512 1024 or 512,1024)") from None
    if any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: sizes must be >= 1")
    return values


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_plugin_argument(parser)
    parser.add_argument("--suite", choices=sorted(SUITES), default="quick",
                        help="quick: T sweep at d=64, H=8, every implementation (minutes); full: T 128..8192, "
                             "d 32/64/128, heads 1/4/8/16, causal on/off, fwd and fwd+bwd; window: T 2048..16384 "
                             "under a causal sliding window of 256; decode: decode steps against a KV cache (Tk up "
                             "to 65536, batch 1..64, GQA and MQA, Tq 1..16, ragged and paged caches; fp32)")
    for flag, what in (("--T", "sequence lengths"), ("--d", "head dims"), ("--heads", "query heads"),
                       ("--batch", "batch sizes")):
        parser.add_argument(flag, nargs="+", type=_ints, metavar="N", help=f"{what} (replaces the suite's)")
    parser.add_argument("--dtype", nargs="+", choices=DTYPES, help="dtypes (replaces the suite's)")
    parser.add_argument("--causal", choices=("on", "off", "both"), help="causal masking (replaces the suite's)")
    parser.add_argument("--mode", nargs="+", choices=MODES, help="fwd, bwd, fwd+bwd (bwd modes need grad=True)")
    parser.add_argument("--only", action="append", default=[], metavar="NAMES",
                        help="only these implementations (comma-separated, repeatable)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--out", type=Path, metavar="FILE", help="result file (default results/<run-id>.json)")
    parser.add_argument("--force", action="store_true",
                        help="let --out replace an existing file that is not a bench result file")
    parser.add_argument("--resume", type=Path, metavar="FILE",
                        help="finish an interrupted run: what to measure comes from FILE, done cells are kept; "
                             "give the --plugin flags it was run with (a file never loads code), and --executor, "
                             "--memory-budget as for a new run")
    parser.add_argument("--timeout", type=positive_number, default=300.0, metavar="S", help="per-task timeout (default 300)")
    parser.add_argument("--threads", type=positive_int, metavar="N", help="threads for torch and BLAS (default: torch's)")
    parser.add_argument("--budget", type=positive_number, metavar="S",
                        help="seconds of timed repeats per cell (quick 0.4, full 1.0)")
    parser.add_argument("--min-samples", type=positive_int, metavar="N", help="at least N timed calls (quick 5, full 7)")
    parser.add_argument("--cell-budget", type=positive_number, metavar="S",
                        help="skip cells predicted to take longer than S seconds (quick 20, full 120; with an "
                             "axis flag such as --T the cells you named always run unless this is given)")
    parser.add_argument("--memory-budget", type=positive_number, metavar="GiB",
                        help="skip cells predicted to need more (default: half of the free RAM; on cuda, of the GPU's)")
    parser.add_argument("--no-memory", action="store_true", help="skip the separate peak-memory runs")
    parser.add_argument("--warm-cache", action="store_true",
                        help="time every call on the same inputs (caches warm, no L2 flush on CUDA) instead of "
                             "rotating through several input sets; see docs/integrity.md")
    parser.add_argument("--rounds", type=positive_int, metavar="N",
                        help="rounds each case's implementations are timed in, their order shuffled each round, "
                             "the budget split over them (default 6; 1: one implementation after another)")
    parser.add_argument("--clock", choices=CLOCKS, default="auto",
                        help="what CPU cells' calls are timed on: cpu (the worker's CPU time, which other processes "
                             "on the cores do not stretch; blind to waiting), wall (elapsed time), or auto (default): "
                             "cpu with --threads 1, else wall (several threads spin and wait for the slowest, which "
                             "CPU time would count as work)")
    parser.add_argument("--reference", metavar="NAME",
                        help="the implementation each other's per-round ratio divides by (default: torch_sdpa "
                             "when it is timed, else the first)")
    parser.add_argument("--quiet", action="store_true", help="no progress output")
    parser.add_argument("--json", action="store_true", help="print the result document as JSON")
    add_model_argument(parser, "time")
    add_executor_arguments(parser)


def _settings(args: argparse.Namespace) -> Any:
    torch = interrupts.import_torch()

    from harness.bench.runner import BenchSettings

    overrides: dict[str, list[Any]] = {}
    for axis in ("T", "d", "heads", "batch"):
        lists = getattr(args, axis)
        if lists:
            overrides[axis] = [v for chunk in lists for v in chunk]
    if args.dtype:
        overrides["dtype"] = list(args.dtype)
    if args.causal:
        overrides["causal"] = {"on": [True], "off": [False], "both": [False, True]}[args.causal]
    if args.mode:
        overrides["mode"] = list(args.mode)
    timing = dataclasses.replace(SUITE_TIMING[args.suite], warm_cache=bool(args.warm_cache))
    if args.budget is not None:
        timing = dataclasses.replace(timing, budget_s=args.budget)
    if args.min_samples is not None:
        timing = dataclasses.replace(timing, min_samples=args.min_samples)
    if args.rounds is not None:
        timing = dataclasses.replace(timing, rounds=args.rounds)
    memory_budget = _memory_budget(args)
    threads = args.threads if args.threads is not None else torch.get_num_threads()
    if args.clock == "cpu" and args.device != "cpu":
        raise UsageError("--clock cpu times CPU work; a CUDA kernel runs on the device: use --clock wall or auto")
    timing = dataclasses.replace(timing, clock=auto_clock(args.clock, args.device, threads))
    return BenchSettings(
        suite=args.suite, overrides=overrides, only=list(args.only), plugins=list(args.plugin),
        timeout_s=args.timeout, timing=timing, memory=not args.no_memory,
        memory_budget_bytes=memory_budget,
        cell_budget_s=_cell_budget(args, overrides),
        threads=threads, device=args.device, model=checked_model(args.model, "bench"), reference=args.reference)


def _memory_budget(args: argparse.Namespace) -> float:
    """Bytes a cell may be predicted to need on this machine: --memory-budget, or half the device's memory free
    now (the RAM's for CPU cells, the GPU's for CUDA ones)."""
    if args.memory_budget is not None:
        return float(args.memory_budget * 2**30)
    free = free_memory_bytes(args.device)
    if free is not None:
        return float(free) / 2
    raise UsageError("cannot read the free RAM here (/proc/meminfo); give --memory-budget GiB")


def _resumed(args: argparse.Namespace, executor: str, address: str | None) -> Any:
    """The settings of the run in ``--resume FILE``: what to measure from the file, checked as flags are;
    plugins, executor and memory budget from this command line and this machine (a file is data)."""
    from harness.bench import resume_settings
    from harness.bench.resume import require_same_plugins
    from harness.discovery import absolute_specs

    stored = resume_settings(args.resume)
    require_same_plugins(args.resume, stored.plugins, absolute_specs(args.plugin))
    if (stored.executor, stored.address) != (executor, address) and not args.quiet:
        was = f"--executor {stored.executor}" + (f" --address {stored.address}" if stored.address else "")
        print(f"attnbench bench: {args.resume} was run with {was}; this resume runs "
              f"{'locally' if executor == 'local' else f'on {address or executor}'} (the command line decides "
              f"where: give {was} to resume there)", file=sys.stderr)
    return dataclasses.replace(stored, plugins=list(absolute_specs(args.plugin)), executor=executor, address=address,
                               memory_budget_bytes=_memory_budget(args))


def _cell_budget(args: argparse.Namespace, overrides: dict[str, list[Any]]) -> float | None:
    """The per-cell time budget: given, or the suite's; none for cells the user named by an axis flag."""
    if args.cell_budget is not None:
        return float(args.cell_budget)
    return None if overrides else SUITE_CELL_BUDGET_S[args.suite]


def _progress_line(cell: BenchCell, index: int, total: int) -> str:
    head = f"[{index}/{total}] {cell.implementation} {cell.case_id} {cell.mode}: {cell.status}"
    if cell.status == Status.OK and cell.median is not None:
        return f"{head} {format_seconds(cell.median)} ({cell.gflops:.1f} GFLOP/s)"
    return f"{head} ({cell.reason})" if cell.reason else head


def run(args: argparse.Namespace) -> int:
    from harness.bench import run as run_bench

    if args.model == LIST:
        return print_catalogue(args.json)
    executor, address = executor_from_args(args)
    if args.resume is not None:
        settings = _resumed(args, executor, address)
        path = args.resume
        if not args.quiet:
            print(f"attnbench bench: resuming {path}; what to measure comes from the file, plugins, executor and "
                  "memory budget from this command line", file=sys.stderr)
    else:
        settings = dataclasses.replace(_settings(args), executor=executor, address=address)
        path = args.out or RESULTS_DIR / f"{new_run_id('bench')}.json"
    args.plugin = settings.plugins
    registry = registry_from_args(args, load_catalogue)  # the timekeeping parent imports no plugin
    _warn_if_loaded(settings.threads, args.quiet)
    _warn_if_oversubscribed(settings.threads)
    progress: list[Progress] = []
    counter = {"n": 0, "total": 0}

    def on_start(todo: int) -> None:
        counter["total"] = todo
        progress.append(Progress(todo, title="bench", enabled=not args.quiet))

    def on_cell(cell: BenchCell) -> None:
        counter["n"] += 1
        if not progress[0].interactive or cell.status not in (Status.OK, Status.SKIPPED):
            progress[0].line(_progress_line(cell, counter["n"], counter["total"]))
        progress[0].advance(f"{cell.implementation} {cell.case_id}")

    try:
        result = run_bench(settings, path, resume=args.resume is not None, force=args.force, registry=registry,
                           on_start=on_start, on_cell=on_cell)
    finally:
        if progress:
            progress[0].close()
    return _present(args, result, path)


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask, which a container or `taskset` narrows)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _warn_if_oversubscribed(threads: int) -> None:
    """More threads than CPUs time the scheduler, not the kernel: said even with --quiet (it is about the flags)."""
    cpus = usable_cpus()
    if threads > cpus:
        print(f"attnbench bench: warning: --threads {threads} but this process may use {cpus} CPU(s): the extra "
              f"threads wait for a core, so times measure the scheduler as much as the kernel; give --threads "
              f"{cpus} or fewer", file=sys.stderr)


def _warn_if_loaded(threads: int, quiet: bool) -> None:
    """Other processes on the cores make multi-threaded BLAS spin and wait: say so before the numbers."""
    try:
        load = os.getloadavg()[0]
    except OSError:
        return
    cores = os.cpu_count() or 1
    if load > cores - 0.5 and not quiet:
        print(f"attnbench bench: warning: load average {load:.1f} on {cores} cores: other processes compete "
              f"for the CPU, so absolute times are noisy (multi-threaded BLAS suffers most"
              f"{'; --threads 1 is steadier' if threads > 1 else ''}); compare ratios within this run",
              file=sys.stderr)


def _present(args: argparse.Namespace, run: Run, path: Path) -> int:
    cells = run.bench_cells()
    problems = [c for c in cells if c.status.is_problem]
    if args.json:
        print(dumps({"path": str(path), **run.to_json()}, indent=1))
        return 1 if problems else 0
    for key, peak in sorted(run.peaks.items()):
        if peak.gflops:
            readings = ""
            if peak.confirmed_gflops:
                readings = f"; higher of {peak.first_gflops or 0.0:.1f} before and {peak.confirmed_gflops:.1f} after the cells"
            print(f"peak {key}: {peak.gflops:.1f} GFLOP/s ({peak.method}{readings})")
        else:
            print(f"peak {key}: not measured ({peak.error})")
    for key, record in sorted((run.bandwidth or {}).items()):
        if record.read_gbps:
            print(f"bandwidth {key}: read {record.read_gbps:.1f} GB/s, copy {record.copy_gbps or 0.0:.1f} GB/s "
                  f"({record.method}; higher of the readings before and after the cells)")
        else:
            print(f"bandwidth {key}: not measured ({record.error})")
    print()
    print(results_table(run))
    skipped: dict[tuple[str, str | None], int] = {}
    for c in cells:
        if c.status == Status.SKIPPED:
            skipped[(c.implementation, c.reason)] = skipped.get((c.implementation, c.reason), 0) + 1
    if skipped:
        print("\nskipped:")
        for (name, reason), n in skipped.items():
            print(f"  {name} ({n} cell{'s' if n > 1 else ''}): {reason}")
    if run.fits:
        print("\nscaling fits (log-log least squares; " + OVERHEAD_RULE + "):")
        print(fits_table(run.fits))
    measured = [c for c in cells if c.status == Status.OK and c.stats]
    noisy = [c for c in measured if is_noisy(c.stats)]
    if noisy:
        print(f"attnbench bench: warning: {len(noisy)} of {len(measured)} cells have "
              f"IQR/median >= {NOISY_IQR_OVER_MEDIAN:.0%} (marked !): the machine is noisy; compare ratios "
              f"within one run, or re-run with a larger --budget", file=sys.stderr)
    spreads = sorted(c.stats.iqr_over_median for c in measured if c.stats and c.stats.iqr_over_median is not None)
    if spreads and not math.isnan(max(spreads)):
        print(f"\nspread IQR/median: median {100 * spreads[len(spreads) // 2]:.1f}%, max {100 * spreads[-1]:.1f}%")
    print(f"results: {path}")
    for c in problems:
        if c.status in INTEGRITY:
            print(f"attnbench bench: {c.status}: {c.implementation} {c.case_id} {c.mode}: {c.reason}", file=sys.stderr)
    if problems:
        print(f"attnbench bench: {len(problems)} cell(s) failed: "
              + ", ".join(f"{c.implementation} {c.case_id} {c.mode}: {c.status}" for c in problems[:5]),
              file=sys.stderr)
    return 1 if problems else 0
