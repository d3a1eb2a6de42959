"""The records of what backs a bench cell's time (docs/integrity.md): the physics floor and its roofs, the
timing worker's own clock, each kept call checked against float64, and the raw times of the value probe. Typed as the other records
(:mod:`harness.results.records`): frozen, read and written whole, unknown keys kept."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from harness.results.records import Record


@dataclass(frozen=True, eq=False, kw_only=True)
class Floor(Record):
    """The physics floor of a cell: the fewest seconds its FLOPs and bytes can take on the roofs."""

    floor_s: float | None = None
    compute_roof_gflops: float | None = None
    memory_roof_gbps: float | None = None
    compute_s: float | None = None
    memory_s: float | None = None
    how: str | None = None


@dataclass(frozen=True, eq=False, kw_only=True)
class Accounting(Record):
    """The timing worker's own clock, phase by phase: it must add up, and agree with the parent's."""

    total_s: float | None = None
    loop_s: float | None = None
    captures_s: float | None = None
    phases_s: float | None = None
    checks_s: float | None = None


@dataclass(frozen=True, eq=False, kw_only=True)
class CheckedCall(Record):
    """One kept timed call checked against float64 on its own inputs: which sample, which rows, the error."""

    sample: int | None = None
    set: int | None = None
    """The input set the call ran on."""
    checked: str | None = None
    """Why the call was not checked, when it was not."""
    rows: str | None = None
    max_abs_err: float | None = None
    bound: float | None = None

    def _keep_null(self, name: str) -> bool:
        return name in ("max_abs_err", "bound") and self.rows is not None


@dataclass(frozen=True, eq=False, kw_only=True)
class Stamped(Record):
    """The parent's own clock on the timed calls (:mod:`harness.bench.driven`): how many calls it timed, the
    median and sum of their samples (the fastest null call's round trip taken off), and the null calls' median;
    ``clock`` says which clock: "wall" (the parent's, go to stopped) or "cpu" (the worker's process tree's CPU
    clock over the same span, read by the parent while the tree was stopped)."""

    calls: int | None = None
    clock: str | None = None
    median_s: float | None = None
    total_s: float | None = None
    latency_s: float | None = None


@dataclass(frozen=True, eq=False, kw_only=True)
class Integrity(Record):
    """What backs a cell's time (docs/integrity.md): the input sets, the checks of kept calls, the
    clock's accounting, and (added by the parent) the physics floor and the task's wall time."""

    ALWAYS = frozenset({"clock"})
    NESTED = {"accounting": Accounting, "floor": Floor, "stamps": Stamped}
    TUPLES = frozenset({"untyped", "kept_problems", "output_problems", "cpu_after_s"})
    RECORD_TUPLES = {"checked": CheckedCall}
    input_sets: int | None = None
    shifted: bool | None = None
    clock: str | None = None
    untyped: tuple[int, ...] | None = None
    kept_problems: tuple[str, ...] | None = None
    output_problems: tuple[str, ...] | None = None
    checked: tuple[CheckedCall, ...] | None = None
    cpu_after_s: tuple[float, ...] | None = None
    spin_s: float | None = None
    accounting: Accounting | None = None
    floor: Floor | None = None
    wall_s: float | None = None
    stamps: Stamped | None = None



@dataclass(frozen=True, eq=False, kw_only=True)
class Rounds(Record):
    """How a cell was timed in rounds beside its case's other contenders (docs/benchmarking.md), and what
    the rounds measured beside it: per-round medians, this cell's time over the reference contender's
    in each round with the median's interval, and the roofs read in the same rounds.

    ``sizes`` splits ``samples_s`` into rounds, in order; ``positions`` is the cell's place in each round's
    shuffled order (0: first). ``reference`` names the contender the ratios divide by (on the reference's
    own cell too); the ratio fields are absent for the reference itself and for a case timed alone.
    ``gemm_gflops`` and ``read_gbps`` are the fastest GEMM call and the highest read reading of the roof probe
    run as one more contender in each round: the roofs beside the cell."""

    TUPLES = frozenset({"sizes", "medians_s", "positions", "ratios", "gemm_samples_gflops", "read_samples_gbps",
                        "thread_gemm_samples_gflops"})
    sizes: tuple[int, ...] | None = None
    medians_s: tuple[float, ...] | None = None
    positions: tuple[int, ...] | None = None
    contenders: int | None = None
    reference: str | None = None
    ratios: tuple[float, ...] | None = None
    """This cell's round median over the reference's, round by round (above 1: slower than the reference)."""
    ratio: float | None = None
    """The median of ``ratios``."""
    ratio_low: float | None = None
    ratio_high: float | None = None
    confidence: float | None = None
    """The interval's exact coverage (distribution-free, from the order statistics of the rounds)."""
    gemm_gflops: float | None = None
    read_gbps: float | None = None
    gemm_samples_gflops: tuple[float, ...] | None = None
    read_samples_gbps: tuple[float, ...] | None = None
    gemm_headroom: float | None = None
    """How much faster than the GEMM beside it a kernel may run on this CPU: the widest vector unit's FLOPs per
    cycle for the cell's dtype over AVX2+FMA's, since torch's GEMM may run AVX2 code where the CPU has wider
    units (MKL does on AMD CPUs); absent in files from before it and where nothing is known (read as 1)."""
    thread_gemm_gflops: float | None = None
    """The probe's GEMM on one thread, on that thread's CPU clock (the fastest of its rounds): a roof a busy
    machine cannot lower, since a preempted thread's clock stops. x the CPUs a cell may use, it bounds a wall-clock
    cell; x 1, a CPU-clock cell (whose samples sum its threads' CPU)."""
    thread_gemm_samples_gflops: tuple[float, ...] | None = None


@dataclass(frozen=True, eq=False, kw_only=True)
class ValueProbe(Record):
    """The value probe's raw times (docs/benchmarking.md, "Values"): the cell's case timed again under several
    distributions of its input values, interleaved in rounds in a shuffled order each round, in the cell's own
    timing worker. Raw samples only: whether the time depends on the values is derived when the file is read
    (:func:`harness.analysis.values.value_findings`), never stored.

    ``samples_s`` holds each distribution's timed calls in order, on ``clock``; ``round_sizes`` splits every
    distribution's samples into the same rounds (each distribution gets as many calls in a round).
    ``not_run`` says, per distribution left out, why (a case without a mask has no sparse mask); ``error``
    why the probe gave no times at all (the cell's own time stands)."""

    TUPLES = frozenset({"round_sizes"})
    clock: str | None = None
    round_sizes: tuple[int, ...] | None = None
    samples_s: Mapping[str, tuple[float, ...]] | None = None
    not_run: Mapping[str, str] | None = None
    error: str | None = None
