"""Contenders of one case timed in rounds, their order shuffled each round, with the roofs read among them.

On a shared machine the load changes from second to second. Timed one after another, two
implementations see different machines and their ratio follows the load; timed in rounds, each
round a shuffled turn of every contender, a load change hits all alike, and the ratio of two
contenders' medians *within a round* cancels it. Each round's ratio is one paired observation;
their median and its distribution-free interval (:func:`harness.analysis.stats.median_interval`)
are stored with the cell (:class:`~harness.results.Rounds`).

Isolation is kept: each implementation is timed in its own worker (kept for the whole run, its
state between rounds held there: inputs built once, the warm-up once), and the parent drives its calls
(:mod:`harness.bench.driven`), keeping each cell's samples and checks between its rounds. A contender that crashes, hangs or raises
costs its own cell only; the others finish their rounds. The roof probe (a GEMM call and a
memory read, :func:`roof_probe_task`) is one more contender in every round, in the peak worker
where no plugin code runs: the roofs a cell's "% of peak" and "% of bandwidth" divide by are read
in the same seconds as the cell.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.analysis.stats import median_interval, quantile
from harness.bench import guard
from harness.bench.timing import pin_threads
from harness.results import Rounds

MAX_ROUNDS = 15
"""The most rounds a case is cut into: fast contenders get rounds of a call or two each, so a load that comes
and goes within a second still hits both sides of most rounds alike."""
REFERENCE = "torch_sdpa"
"""The contender each other's per-round ratio divides by when the settings name none and it is timed."""
PROBE_GEMM = {"float64": 512, "float32": 512, "float16": 384, "bfloat16": 384}
"""Side of the probe's square GEMM: near the plateau of a core's GEMM rate, and a call of a millisecond or two,
as short as the cells it stands beside: on a busy machine a long call is preempted where a short one is not."""
PROBE_CALLS = 5
"""GEMM calls a round: under load a call can be preempted, and a multi-threaded GEMM waits for its slowest
thread, so one call can read the roof far low; the fastest of a few short calls is the roof offered then."""
PROBE_BYTES = 256 * 2**20
"""The probe's read buffer (as :data:`harness.bench.bandwidth.STREAM_BYTES`): beyond the caches."""
PROBE_MIN_BYTES = 4 * 2**20
"""The smallest read buffer a reduced ``--roof-budget`` gives the probe."""

# ---------------------------------------------------------------- worker side


_PROBE: dict[str, Any] = {}


def roof_probe_task(dtype: str, device: str, threads: int | None, clock: str = "wall", share: float = 1.0
                    ) -> tuple[float, float, float | None]:
    """Worker (the peak one): (GEMM GFLOP/s, read GB/s, one thread's GEMM GFLOP/s of CPU) now: the fastest of
    :data:`PROBE_CALLS` square GEMM calls of :data:`PROBE_GEMM` and one ``torch.sum`` over :data:`PROBE_BYTES`
    (buffers made, and first touched, once per worker), timed on the cells' ``clock``; then, on a CPU, the same
    GEMM on one thread timed on that thread's CPU clock, which a busy machine does not stretch (a preempted
    thread's clock stops). The roof beside a cell is the best of its rounds' readings. ``share``: of the read
    buffer, as ``--roof-budget`` shrinks the roofs' problems (:func:`harness.bench.timing.roof_share`; a buffer the
    caches hold reads a higher bandwidth, which only lowers the floor)."""
    import torch

    from harness.reference.tensors import TORCH_DTYPES

    pin_threads(threads)
    n = PROBE_GEMM.get(dtype, 1024)
    key = f"{dtype}/{device}"
    if key not in _PROBE:
        gen = torch.Generator().manual_seed(0)
        _PROBE[key] = tuple(torch.randn(n, n, generator=gen).to(TORCH_DTYPES[dtype]).to(device) for _ in range(2))
    if device not in _PROBE:
        size = max(PROBE_MIN_BYTES, int(PROBE_BYTES * min(1.0, share))) if device == "cpu" else PROBE_BYTES
        _PROBE[device] = torch.ones(size // 4, dtype=torch.float32, device=device)
    a, b = _PROBE[key]
    timer = guard.CPU_CLOCK if clock == "cpu" and device == "cpu" else guard.CLOCK
    gemm = []
    for _ in range(PROBE_CALLS):
        t0 = timer()
        torch.matmul(a, b)
        gemm.append(timer() - t0)
    t0 = timer()
    _PROBE[device].sum()
    read = timer() - t0
    return 2.0 * n ** 3 / min(gemm) / 1e9, _PROBE[device].numel() * 4 / read / 1e9, _one_thread_gflops(a, b) if device == "cpu" else None


def _one_thread_gflops(a: Any, b: Any) -> float | None:
    """GFLOP/s of one thread's ``a @ b`` on its own CPU clock: the fastest of :data:`PROBE_CALLS`."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        best = min(_thread_timed(lambda: torch.matmul(a, b)) for _ in range(PROBE_CALLS))
    finally:
        torch.set_num_threads(threads)
    return 2.0 * a.shape[0] ** 3 / best / 1e9 if best > 0 else None


def _thread_timed(call: Callable[[], object]) -> float:
    t0 = time.thread_time()
    call()
    return time.thread_time() - t0


# ---------------------------------------------------------------- parent side: what the rounds mean


def round_order(contenders: Sequence[str], rounds: int, seed: str) -> list[list[str]]:
    """Each round's order of ``contenders``, shuffled each round (reproducibly from ``seed``: the case)."""
    rng = random.Random(seed)
    out = []
    for _ in range(rounds):
        order = list(contenders)
        rng.shuffle(order)
        out.append(order)
    return out


def rounds_for(budget_s: float, call_s: Sequence[float], least: int) -> int:
    """How many rounds a case gets once its first round measured each contender's call: about one call of the
    slowest contender a round (``budget_s`` over its call), at least ``least``, at most :data:`MAX_ROUNDS`."""
    slowest = max((c for c in call_s if c > 0), default=0.0)
    if slowest <= 0:
        return least
    return max(least, min(MAX_ROUNDS, int(budget_s / slowest)))


def round_medians(samples: Sequence[float], sizes: Sequence[int]) -> list[float]:
    """The median of each round's samples (``sizes`` splits ``samples`` in order)."""
    out, at = [], 0
    for size in sizes:
        part = sorted(samples[at:at + size])
        at += size
        out.append(quantile(part, 0.5) if part else float("nan"))
    return out


@dataclass
class Probe:
    """The roof probe's readings, round by round."""

    gemm_gflops: list[float] = field(default_factory=list)
    read_gbps: list[float] = field(default_factory=list)
    thread_gflops: list[float] = field(default_factory=list)


def gemm_headroom(dtype: str, device: str) -> float | None:
    """:attr:`~harness.results.Rounds.gemm_headroom` on this machine (None on CUDA or where the CPU says nothing)."""
    from harness.bench.roofs import FLOPS_PER_CYCLE, cpu_flags

    if device != "cpu":
        return None
    flags = cpu_flags()
    rates = [r[dtype] for flag, r in FLOPS_PER_CYCLE.items() if flag in flags and dtype in r]
    base = FLOPS_PER_CYCLE["fma"].get(dtype)
    if not rates or not base or "fma" not in flags:
        return None
    return max(1.0, max(rates) / base)


def rounds_record(medians: Sequence[float], sizes: Sequence[int], positions: Sequence[int], contenders: int,
                  reference: str | None, reference_medians: Sequence[float] | None, probe: Probe,
                  headroom: float | None = None) -> Rounds:
    """A cell's :class:`~harness.results.Rounds`: per-round medians, the ratio to the reference's medians of
    the same rounds (absent for the reference itself, given no ``reference_medians``, and without a
    reference), and the roofs the probe read in those rounds."""
    ratios: tuple[float, ...] | None = None
    ratio = low = high = coverage = None
    if reference_medians is not None and len(reference_medians) == len(medians):
        ratios = tuple(m / r for m, r in zip(medians, reference_medians) if r > 0)
        if ratios:
            ratio, low, high, coverage = median_interval(ratios)
    return Rounds(sizes=tuple(sizes), medians_s=tuple(medians), positions=tuple(positions), contenders=contenders,
                  reference=reference, ratios=ratios, ratio=ratio, ratio_low=low,
                  ratio_high=high, confidence=coverage,
                  gemm_gflops=max(probe.gemm_gflops) if probe.gemm_gflops else None,
                  read_gbps=max(probe.read_gbps) if probe.read_gbps else None,
                  gemm_samples_gflops=tuple(probe.gemm_gflops) or None, read_samples_gbps=tuple(probe.read_gbps) or None,
                  gemm_headroom=headroom, thread_gemm_gflops=max(probe.thread_gflops) if probe.thread_gflops else None,
                  thread_gemm_samples_gflops=tuple(probe.thread_gflops) or None)


def choose_reference(contenders: Sequence[str], wanted: str | None) -> str | None:
    """The contender the others' ratios divide by: ``wanted`` when timed, else :data:`REFERENCE`, else the
    first; None when fewer than two are timed."""
    if len(contenders) < 2:
        return None
    for name in (wanted, REFERENCE):
        if name in contenders:
            return name
    return contenders[0]
