"""`attnbench bench`: time, FLOP/s against the measured GEMM peak, peak memory and scaling fits.

Every cell runs in a worker process with a timeout; cells are written to the result file
(default ``results/<run-id>.json``) as they finish, so an interrupted run can be finished
with ``--resume FILE``. Timings on a shared machine are noisy: compare implementations by
the ratios within one run, and heed the IQR/median warnings.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.bench.settings import VALUE_PROBES
from harness.bench.sweeps import SUITE_CELL_BUDGET_S, SUITE_TIMING, SUITES
from harness.bench.timing import CLOCKS, auto_clock
from harness.cli import add_executor_arguments, add_plugin_argument, executor_from_args
from harness.cli.bench_output import present
from harness.cli.case_flags import add_case_arguments, overrides_from_args
from harness.cli.common import default_of, positive_int, positive_number, registry_of
from harness.cli.model_flag import LIST, add_model_argument, checked_model, print_catalogue
from harness.errors import UsageError
from harness.report.terminal import format_seconds
from harness.results import BenchCell, Status
from harness.runtime import interrupts
from harness.runtime.isolation import start_forkserver
from harness.runtime.process_tree import usable_cpus
from harness.runtime.progress import Progress

if TYPE_CHECKING:
    from harness.bench.settings import BenchSettings

HELP = "time implementations: median, spread, GFLOP/s, % of the GEMM peak, peak memory, scaling fits"
DESCRIPTION = __doc__.split("\n\n")[0] + "\n\n" + __doc__.split("\n\n")[1]


def _settings_default(name: str) -> Any:
    from harness.bench.settings import BenchSettings

    return default_of(BenchSettings, name)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_plugin_argument(parser)
    parser.add_argument("--suite", choices=sorted(SUITES), default=_settings_default("suite"),
                        help="quick: T sweep at d=64, H=8, every implementation (minutes); full: T 128..8192, "
                             "d 32/64/128, heads 1/4/8/16, causal on/off, fwd and fwd+bwd; window: T 2048..16384 "
                             "under a causal sliding window of 256; decode: decode steps against a KV cache (Tk up "
                             "to 65536, batch 1..64, GQA and MQA, Tq 1..16, ragged and paged caches; fp32). With --model: "
                             "quick is the model's short sweep (minutes on 2 cores), full its long one")
    add_case_arguments(parser)
    parser.add_argument("--only", action="append", default=[], metavar="NAMES",
                        help="only these implementations (comma-separated, repeatable)")
    parser.add_argument("--out", type=Path, metavar="FILE", help="result file (default results/<run-id>.json)")
    parser.add_argument("--force", action="store_true",
                        help="let --out replace an existing file that is not a bench result file")
    parser.add_argument("--resume", type=Path, metavar="FILE",
                        help="finish an interrupted run: what to measure comes from FILE, done cells are kept; "
                             "give the --plugin flags it was run with (a file never loads code), and --executor, "
                             "--memory-budget as for a new run")
    parser.add_argument("--timeout", type=positive_number, metavar="S",
                        help=f"per-task timeout (default {_settings_default('timeout_s'):g})")
    parser.add_argument("--threads", type=positive_int, metavar="N", help="threads for torch and BLAS (default: torch's)")
    parser.add_argument("--budget", type=positive_number, metavar="S",
                        help="seconds of timed repeats per cell (" + _per_suite("budget_s") + ")")
    parser.add_argument("--min-samples", type=positive_int, metavar="N",
                        help="at least N timed calls (" + _per_suite("min_samples") + ")")
    parser.add_argument("--roof-budget", type=positive_number, metavar="S",
                        help="seconds of timed calls in each roof reading (the GEMM peak, the bandwidth), before "
                             "and after the cells (default: 1.5 for the peak, 0.6 for each bandwidth figure; at "
                             "least 3 calls each); less for a smoke run of tiny cells, which on a CPU also shrinks the roof "
                             "problems in proportion")
    parser.add_argument("--cell-budget", type=positive_number, metavar="S",
                        help="skip cells predicted to take longer than S seconds ("
                             + ", ".join(f"{suite} {SUITE_CELL_BUDGET_S[suite]:g}" for suite in ("quick", "full"))
                             + "; with an axis flag such as --T the cells you named always run unless this is given)")
    parser.add_argument("--memory-budget", type=positive_number, metavar="GiB",
                        help="skip cells predicted to need more (default: half of the free RAM; on cuda, of the GPU's)")
    parser.add_argument("--no-memory", action="store_true", help="skip the separate peak-memory runs")
    parser.add_argument("--warm-cache", action="store_true",
                        help="time every call on the same inputs (caches warm, no L2 flush on CUDA) instead of "
                             "rotating through several input sets; see docs/integrity.md")
    parser.add_argument("--rounds", type=positive_int, metavar="N",
                        help="rounds each case's implementations are timed in, their order shuffled each round, "
                             f"the budget split over them (default {SUITE_TIMING['quick'].rounds}; 1: one "
                             "implementation after another)")
    parser.add_argument("--clock", choices=CLOCKS, default="auto",
                        help="what CPU cells' calls are timed on: cpu (the worker's CPU time, which other processes "
                             "on the cores do not stretch; blind to waiting), wall (elapsed time), or auto (default): "
                             "cpu with --threads 1, else wall (several threads spin and wait for the slowest, which "
                             "CPU time would count as work)")
    parser.add_argument("--reference", metavar="NAME",
                        help="the implementation each other's per-round ratio divides by (default: torch_sdpa "
                             "when it is timed, else the first)")
    parser.add_argument("--value-probe", choices=VALUE_PROBES, default=_settings_default("value_probe"),
                        help="time cells again under other distributions of their input values (equal logits, large "
                             "magnitudes, one-hot keys, zeros, a sparse mask) and report a time that depends on them: "
                             "one (default: one cell per implementation and mode), all, or off")
    parser.add_argument("--quiet", action="store_true", help="no progress output")
    parser.add_argument("--json", action="store_true", help="print the result document as JSON")
    add_model_argument(parser, "time")
    add_executor_arguments(parser)


def _per_suite(field: str) -> str:
    """A timing default as each main suite sets it (``quick 0.4, full 1.0``), read from the suites' table."""
    return ", ".join(f"{suite} {getattr(SUITE_TIMING[suite], field):g}" for suite in ("quick", "full"))


@dataclass(frozen=True)
class BenchRequest:
    """``attnbench bench`` mapped once from its flags: the library's settings, the result file, how to report.

    ``attnbench run`` builds one too (:func:`settings_for` with its own flags) and calls :func:`execute`.
    """

    settings: BenchSettings
    out: Path
    resume: bool = False
    """``out`` is an interrupted run's file: its cells are kept and only the missing ones measured."""
    force: bool = False
    quiet: bool = False
    json: bool = False


def settings_for(suite: str, *, overrides: dict[str, list[Any]] | None = None, only: Sequence[str] = (),
                 plugins: Sequence[str] = (), threads: int | None = None, budget_s: float | None = None,
                 min_samples: int | None = None, rounds: int | None = None, warm_cache: bool = False,
                 roof_budget_s: float | None = None,
                 cell_budget_s: float | None = None, memory_budget_gib: float | None = None,
                 timeout_s: float | None = None, memory: bool = True, device: str | None = None,
                 model: str | None = None, reference: str | None = None, executor: str = "local",
                 address: str | None = None, clock: str = "auto", value_probe: str | None = None) -> BenchSettings:
    """The library's settings from what a command line gave (None: not given). Where each default lives: the
    suite's timing and cell budget in its tables (:mod:`harness.bench.sweeps`), threads torch's, the rest in
    :class:`~harness.bench.runner.BenchSettings` (the memory budget, half the free memory, is worked out by
    :func:`harness.bench.run` when the run starts)."""
    from harness.bench.settings import BenchSettings

    overrides = overrides or {}
    timing = SUITE_TIMING[suite]
    timing = replace(timing, warm_cache=warm_cache, budget_s=timing.budget_s if budget_s is None else budget_s,
                     min_samples=timing.min_samples if min_samples is None else min_samples,
                     rounds=timing.rounds if rounds is None else rounds, roof_budget_s=roof_budget_s)
    if cell_budget_s is None and not overrides:  # cells the user named by an axis flag are never skipped for time
        cell_budget_s = SUITE_CELL_BUDGET_S[suite]
    device = default_of(BenchSettings, "device") if device is None else device
    if clock == "cpu" and device != "cpu":
        raise UsageError("--clock cpu times CPU work; a CUDA kernel runs on the device: use --clock wall or auto")
    threads = threads if threads is not None else interrupts.import_torch().get_num_threads()
    timing = replace(timing, clock=auto_clock(clock, device, threads))
    return BenchSettings(
        suite=suite, overrides=overrides, only=list(only), plugins=list(plugins), timing=timing, memory=memory,
        memory_budget_bytes=_bytes(memory_budget_gib), cell_budget_s=cell_budget_s, threads=threads,
        timeout_s=default_of(BenchSettings, "timeout_s") if timeout_s is None else timeout_s, device=device,
        model=model, reference=reference, executor=executor, address=address,
        value_probe=default_of(BenchSettings, "value_probe") if value_probe is None else value_probe)


def _bytes(gib: float | None) -> float | None:
    """``--memory-budget``'s GiB in bytes (None: not given; the session takes half the free memory)."""
    return None if gib is None else float(gib * 2**30)


def settings_from_args(args: argparse.Namespace) -> BenchSettings:
    """The flags of a new run as settings: what to measure, how, and where."""
    executor, address = executor_from_args(args)
    return settings_for(
        args.suite, overrides=overrides_from_args(args), only=args.only, plugins=args.plugin, threads=args.threads,
        budget_s=args.budget, min_samples=args.min_samples, rounds=args.rounds, warm_cache=args.warm_cache,
        roof_budget_s=args.roof_budget, cell_budget_s=args.cell_budget, memory_budget_gib=args.memory_budget, timeout_s=args.timeout,
        memory=not args.no_memory, device=args.device, model=checked_model(args.model, "bench"),
        reference=args.reference, executor=executor, address=address, clock=args.clock, value_probe=args.value_probe)


def request_from_args(args: argparse.Namespace) -> BenchRequest:
    """The command line, mapped once: a new run's settings, or (``--resume``) the stored run's."""
    from harness.bench.session import default_out

    if args.resume is None:
        return BenchRequest(settings_from_args(args), args.out or default_out(), force=args.force, quiet=args.quiet,
                            json=args.json)
    return BenchRequest(_resumed(args), args.resume, resume=True, force=args.force, quiet=args.quiet, json=args.json)


def _resumed(args: argparse.Namespace) -> BenchSettings:
    """The settings of the run in ``--resume FILE``: what to measure from the file, checked as flags are;
    plugins, executor and memory budget from this command line and this machine (a file is data)."""
    from harness.bench import resume_settings
    from harness.bench.resume import require_same_plugins
    from harness.contract.discovery import absolute_specs

    executor, address = executor_from_args(args)
    stored = resume_settings(args.resume)
    plugins = absolute_specs(args.plugin)
    require_same_plugins(args.resume, stored.plugins, plugins)
    if not args.quiet:
        if (stored.executor, stored.address) != (executor, address):
            was = f"--executor {stored.executor}" + (f" --address {stored.address}" if stored.address else "")
            print(f"attnbench bench: {args.resume} was run with {was}; this resume runs "
                  f"{'locally' if executor == 'local' else f'on {address or executor}'} (the command line decides "
                  f"where: give {was} to resume there)", file=sys.stderr)
        print(f"attnbench bench: resuming {args.resume}; what to measure comes from the file, plugins, executor and "
              "memory budget from this command line", file=sys.stderr)
    return replace(stored, plugins=list(plugins), executor=executor, address=address,
                   memory_budget_bytes=_bytes(args.memory_budget))


def _progress_line(cell: BenchCell, index: int, total: int) -> str:
    head = f"[{index}/{total}] {cell.implementation} {cell.case_id} {cell.mode}: {cell.status}"
    if cell.status == Status.OK and cell.median is not None:
        return f"{head} {format_seconds(cell.median)} ({cell.gflops:.1f} GFLOP/s)"
    return f"{head} ({cell.reason})" if cell.reason else head


def run(args: argparse.Namespace) -> int:
    if args.model == LIST:
        return print_catalogue(args.json)
    if args.out is not None and args.resume is None:  # a bad --out costs a second, not torch's import
        from harness.results import check_out

        check_out(Path(args.out), "bench", force=args.force)
    return execute(request_from_args(args))


def execute(request: BenchRequest) -> int:
    """Run the bench ``request`` describes and print what it measured; the exit status (1: a cell failed)."""
    from harness.bench import run as run_bench
    from harness.bench.catalogue import load_catalogue

    settings = request.settings
    start_forkserver(from_here=True, huge_pages=True)  # timing workers' heaps on huge pages (isolation.HUGE_PAGE_HEAPS)
    registry = registry_of(settings.plugins, load_catalogue)  # the timekeeping parent imports no plugin
    _warn_if_loaded(settings.threads, request.quiet)
    _warn_if_oversubscribed(settings.threads)
    progress: list[Progress] = []
    counter = {"n": 0, "total": 0}

    def on_start(todo: int) -> None:
        counter["total"] = todo
        progress.append(Progress(todo, title="bench", enabled=not request.quiet))

    def on_cell(cell: BenchCell) -> None:
        counter["n"] += 1
        if not progress[0].interactive or cell.status not in (Status.OK, Status.SKIPPED):
            progress[0].line(_progress_line(cell, counter["n"], counter["total"]))
        progress[0].advance(f"{cell.implementation} {cell.case_id}")

    try:
        result = run_bench(settings, request.out, resume=request.resume, force=request.force, registry=registry,
                           on_start=on_start, on_cell=on_cell)
    finally:
        if progress:
            progress[0].close()
    return present(result, request.out, request.json)


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
