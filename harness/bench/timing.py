"""Honest wall-clock timing of one zero-argument call: warm-up, repeats to a budget, raw samples.

CPU: ``time.perf_counter`` around each call, garbage collection off, the thread count
pinned before and recorded with the samples. The first calls pay for lazy initialisation
(thread pools, kernel selection, page faults on fresh buffers), so at least one call and
about ``warmup_s`` seconds of calls are run and thrown away.

CUDA: the method of ``triton.testing.do_bench``. Kernels are asynchronous, so host clocks would
time the launch; instead a pair of CUDA events brackets each call. The end event is recorded after a
device-wide synchronize, so work the call queued on other streams is inside the bracket; the
synchronize's own latency (a few microseconds; ``scripts/gpu_check.sh`` measures it as the time of an
empty call) is inside it too, so a call of tens of microseconds reads a little slow,
never fast. Before every timed call a 256 MB buffer is zeroed, which evicts the L2 cache, so no call is
timed with its inputs still warm in cache from the previous one (``TimingConfig.warm_cache`` turns the
flush off); the zeroing is queued before the start event, so it is not timed. ``before(i)`` (when given)
runs before timed call ``i``, outside the bracket too: the bench worker shifts the inputs there.
These assumptions hold only on CUDA and are listed in docs/benchmarking.md ("On a GPU").

``synchronized_perf_counter`` is the timer for pytest-benchmark: it synchronises CUDA (when
it is in use) before reading the clock, so a round ends when the device work ends.
"""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

from harness.runtime.isolation import THREAD_VARIABLES

L2_FLUSH_BYTES = 256 * 1024 * 1024
"""Bigger than any GPU's L2 (triton.testing.do_bench uses the same size)."""


@dataclass(frozen=True)
class TimingConfig:
    """How long to time one cell. Picklable: it travels to the worker process."""

    warmup_s: float = 0.1
    """Minimum seconds of warm-up calls (at least one call is always made)."""
    budget_s: float = 1.0
    """Stop repeating once this many seconds were spent in timed calls (and min_samples reached)."""
    min_samples: int = 5
    """Timed calls made whatever the budget: always honoured, even above ``max_samples``."""
    max_samples: int = 1000
    """Where the budget stops adding samples (a fast call would otherwise add millions)."""
    warm_cache: bool = False
    """Time every call on the same inputs (one input set, no L2 flush on CUDA): the warm-cache case, on
    purpose. The default rotates through several input sets (docs/integrity.md)."""
    checks: bool = True
    """The integrity checks of each cell (docs/integrity.md); off only to measure what they cost."""
    rounds: int = 6
    """Rounds the contenders of one case are timed in, their order shuffled each round, with the roof probe
    among them (:mod:`harness.bench.rounds`); each round takes ``budget_s / rounds`` and at least one call of
    each. 1: each contender's calls in one block (as pytest-benchmark and timeit do)."""
    clock: str = "wall"
    """What a CPU cell's timed calls are measured on: "wall" (elapsed time) or "cpu" (the worker's CPU time,
    which other processes sharing the cores do not stretch; valid for a call computed by one thread on the CPU,
    blind to waiting, and held against the physics floor like any time). ``bench --clock auto`` picks cpu for
    one-thread CPU runs (:func:`auto_clock`)."""
    roof_budget_s: float | None = None
    """Seconds of timed calls in each roof reading (the GEMM peak; the bandwidth's read, then its copy), before
    the cells and again after them. None: each roof's own default (:data:`harness.bench.peak.PEAK_TIMING`,
    :data:`harness.bench.bandwidth.BANDWIDTH_TIMING`). Less reads a roof from fewer calls (at least
    :data:`ROOF_MIN_SAMPLES`): for a smoke run of millisecond cells, where the default roofs take most of it."""


CLOCKS = ("auto", "cpu", "wall")
ROOF_MIN_SAMPLES = 3
"""Calls a roof reading makes whatever ``roof_budget_s``: a median of fewer would be one call's luck."""


def roof_timing(default: TimingConfig, clock: str, budget_s: float | None) -> TimingConfig:
    """A roof's timing on the cells' ``clock``: its ``default``, or ``budget_s`` seconds (``--roof-budget``)."""
    if budget_s is None:
        return replace(default, clock=clock)
    return replace(default, clock=clock, budget_s=budget_s, warmup_s=min(default.warmup_s, budget_s),
                   min_samples=min(default.min_samples, ROOF_MIN_SAMPLES))


def roof_share(default: TimingConfig, device: str, budget_s: float | None) -> float:
    """The share of its default problem a roof reading runs with ``budget_s`` (``--roof-budget``): 1 at the default
    budget or more, and on a GPU (where no theoretical roof stands above a small problem's low reading); on a
    CPU, the budget's share of the default's. A smoke run's roofs then take milliseconds, not seconds. A smaller
    problem reads the GEMM peak lower and the bandwidth higher (the caches serve it): the floor's compute roof
    is never below the CPU's theoretical one (:func:`harness.bench.roofs.physics_floor`), and a higher
    bandwidth only lowers the floor, so a smoke run can never flag an honest kernel for it."""
    if budget_s is None or device != "cpu" or budget_s >= default.budget_s:
        return 1.0
    return budget_s / default.budget_s


def auto_clock(clock: str, device: str, threads: int) -> str:
    """``clock`` with "auto" resolved: "cpu" for CPU cells with one thread (a preempted call is not stretched on
    it, and one thread's CPU time is its compute), else "wall" (a GPU's work is not the host's CPU time; several
    threads spin and wait for the slowest, which CPU time counts as work)."""
    if clock != "auto":
        return clock
    return "cpu" if device == "cpu" and threads == 1 else "wall"


@contextmanager
def gc_disabled() -> Iterator[None]:
    """Garbage collection off: a collection in the middle of a call would be timed as the call."""
    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def freeze_imports() -> None:
    """Put every object alive now out of the collector's reach (``gc.freeze``), garbage collected first.

    Called once a worker has imported what it runs (torch, the harness, the plugin): their objects live as long as
    the worker does. The full collection each timed round starts with (:func:`gc_disabled`) then scans only what
    the cells made since, microseconds instead of ~0.1 s of CPU over torch's ~170,000 objects, paid by every
    contender in every round. Nothing changes for the calls: objects are still freed by reference counting, and
    a collection still precedes each round's calls."""
    gc.collect()
    gc.freeze()


def pin_threads(threads: int | None) -> int:
    """Set torch's intra-op thread count (None: leave the default); return the count in force.

    NumPy's BLAS reads OMP_NUM_THREADS / OPENBLAS_NUM_THREADS at import, so those are set in
    the environment before a worker starts (see :func:`thread_environment`).
    """
    import torch

    if threads is not None and torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    return torch.get_num_threads()


COMPILE_IN_PROCESS = {"TORCHINDUCTOR_COMPILE_THREADS": "1"}
"""torch.compile compiles in the worker itself: no pool of compile processes runs beside the timing, or is
left behind by a cell (a process a cell leaves running is a violation, :mod:`harness.runtime.isolation`)."""


@contextmanager
def thread_environment(threads: int) -> Iterator[None]:
    """Pin BLAS/OpenMP thread counts (and torch.compile's compile processes: none) for worker processes
    started inside this block."""
    saved = {name: os.environ.get(name) for name in (*THREAD_VARIABLES, *COMPILE_IN_PROCESS)}
    os.environ.update({name: str(threads) for name in THREAD_VARIABLES})
    os.environ.update(COMPILE_IN_PROCESS)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def time_cpu(fn: Callable[[], Any], config: TimingConfig = TimingConfig()) -> list[float]:
    """Seconds per call of ``fn``, one sample per call, after warm-up; gc off throughout. Each call is timed on
    ``config.clock`` (wall, or the process's CPU time), the warm-up on the wall clock."""
    clock = time.process_time if config.clock == "cpu" else time.perf_counter
    with gc_disabled():
        started = time.perf_counter()
        calls = 0
        while calls < 1 or time.perf_counter() - started < config.warmup_s:
            out = fn()
            del out
            calls += 1
        samples: list[float] = []
        spent = 0.0
        while len(samples) < config.min_samples or (len(samples) < config.max_samples and spent < config.budget_s):
            t0 = clock()
            out = fn()
            t1 = clock()
            del out  # freeing the output is not part of the call
            samples.append(t1 - t0)
            spent += t1 - t0
    return samples


class CudaTimes(NamedTuple):
    """What :func:`cuda_timed` measured: event samples, and the host clock's seconds of the warm-up and of the
    timed loop (the loop's host time holds the samples, the flushes and each synchronize: never less than them)."""

    samples: list[float]
    warmup_s: float
    loop_s: float


def cuda_timed(fn: Callable[[], Any], config: TimingConfig = TimingConfig(),
               before: Callable[[int], None] | None = None) -> CudaTimes:
    """Seconds per call measured with CUDA events, L2 flushed before each call (do_bench's method); ``before(i)``
    runs before timed call ``i``, outside its bracket."""
    import torch

    cache = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
    flush = (lambda: None) if config.warm_cache else cache.zero_
    with gc_disabled():
        warm_started = time.perf_counter()
        fn()  # the first call (a compile, a cuBLAS handle, a kernel's load) is not in the estimate
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        start.record()
        for _ in range(5):
            flush()
            fn()
        end.record()
        torch.cuda.synchronize()
        estimate_s = max(start.elapsed_time(end) / 5 / 1000, 1e-7)
        warmup = max(1, int(config.warmup_s / estimate_s))
        repeats = max(config.min_samples, min(config.max_samples, int(config.budget_s / estimate_s)))
        for _ in range(warmup):
            fn()
        torch.cuda.synchronize()
        warmup_s = time.perf_counter() - warm_started
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]  # type: ignore[no-untyped-call]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]  # type: ignore[no-untyped-call]
        loop_started = time.perf_counter()
        for i in range(repeats):
            if before is not None:
                before(i)
            flush()  # evict L2: the call starts cold, as inside a model
            starts[i].record()
            fn()
            torch.cuda.synchronize()  # every stream's work done: a kernel on a side stream is timed too
            ends[i].record()
        torch.cuda.synchronize()
        loop_s = time.perf_counter() - loop_started
    del cache
    return CudaTimes([s.elapsed_time(e) / 1000 for s, e in zip(starts, ends)], warmup_s, loop_s)


def time_cuda(fn: Callable[[], Any], config: TimingConfig = TimingConfig()) -> list[float]:
    """Seconds per call measured with CUDA events, L2 flushed before each call (:func:`cuda_timed`)."""
    return cuda_timed(fn, config).samples


def time_call(fn: Callable[[], Any], device: str, config: TimingConfig = TimingConfig()) -> list[float]:
    """Time ``fn`` on ``device`` ("cpu" or "cuda") with the right clock."""
    return time_cuda(fn, config) if device == "cuda" else time_cpu(fn, config)


def synchronized_perf_counter() -> float:
    """perf_counter after waiting for the GPU (if torch has initialised CUDA): pytest-benchmark's timer."""
    import sys

    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()
    return time.perf_counter()
