"""The comparison engine: one verdict per cell, for every route that compares two timings.

``attnbench ab``, ``attnbench compare`` (attnbench result files, ``ab``'s side files and pytest-benchmark
JSON) and ``report --history``'s steps all call this module; nothing else decides "slower".

Given a cell's base and head timings, the threshold ``t`` and the level, it returns one of four verdicts,
with the ratio head/base (above 1 is slower), a 95% interval for it, and the cell's minimum detectable
effect:

- **slower**: the whole interval lies above 1 and the ratio is beyond ``1 + t``;
- **faster**: the whole interval lies below 1 and the ratio is below ``1 / (1 + t)``;
- **unchanged**: the whole interval lies within the threshold band ``[1 / (1 + t), 1 + t]``;
- **undecided**: anything else: the interval straddles an edge of the band, so the noise allows neither
  "changed beyond the threshold" nor "within the threshold" (or too few rounds give no interval at the level).

"Slower" needs only that the interval exclude 1 (no slow-down at all is ruled out) and the estimate be past
the threshold; requiring the interval's low end past ``1 + t`` instead would leave most real slow-downs of
about ``1 + t`` undecided forever. Its false-alarm rate is what the interval excludes on one side: at most
``alpha / 2`` per comparison (below).

Two kinds of input, two intervals, one rule:

- **Paired rounds** (:func:`judge_paired`): base and head timed in interleaved rounds, in a random order each
  round (``attnbench ab``). The unit of replication is the round; the estimate is the median of the per-round
  ratios and the interval the distribution-free one for that median (the order statistics a sign test
  inverts). When both sides run the same code the random order makes them exchangeable in every round, so
  each round's ratio is as likely above 1 as below, whatever the load does, and the interval's low end is
  above 1 with probability at most ``alpha_cell / 2``. Over ``m`` cells each interval has level
  ``1 - alpha / m`` (Bonferroni, :func:`per_cell_alpha`), so the whole comparison's intervals hold together
  with probability at least ``1 - alpha`` (the "95% interval" at the default ``alpha`` 0.05) and it raises
  a false alarm with probability at most ``alpha / 2``. That holds for two processes that differ only in the
  code they run; two processes running the same code can differ persistently (by where their buffers landed),
  so ``ab`` spreads its rounds over several pairs of worker processes and the interval is widened to hold
  each pair's median ratio.
- **Separate samples** (:func:`judge_separate`): two sample sets timed apart (two ``bench`` runs, two
  pytest-benchmark runs, two commits in a history). The estimate is the ratio of the medians; the interval
  is the ratio of the two medians' distribution-free intervals (each at ``alpha_cell / 2``), widened by
  what moves between two runs and no sample shows: ``1 + IQR/median of base + IQR/median of head``, times,
  for the wall clock only, the larger load stretch (load average / cores, when above 1: a run at load 6 on
  2 cores may get a third of a core). Samples on a CPU clock are not stretched by other processes, so they
  get no load stretch. Samples that are independent rounds (two separate ``ab`` runs' side files) need no
  run-to-run allowance. The allowance is a bound drawn from the runs' own noise, not a theorem: the paired
  route is the one with a proven false-alarm bound.

The **minimum detectable effect** (MDE) is how far the interval reaches from its estimate, as a factor:
``max(ratio / low, high / ratio)``. A true slow-down ``r`` is decided "slower" once ``r`` exceeds both the MDE
and ``1 + t``; a cell whose MDE is above ``1 + t`` cannot be decided "unchanged" at all. Infinite (None)
when nothing is decidable (no interval at the level, unknown noise).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from harness.analysis import stats

SLOWER, FASTER, UNCHANGED, UNDECIDED = "slower", "faster", "unchanged", "undecided"
VERDICTS = (SLOWER, FASTER, UNCHANGED, UNDECIDED)
DEFAULT_THRESHOLD = 0.10
"""Every route's default: a slow-down beyond 10% fails a comparison."""
DEFAULT_ALPHA = 0.05
"""1 - the intervals' joint level: "95% interval" everywhere; the false-alarm rate is at most alpha / 2."""
PAIRED, SEPARATE, REPLICATIONS = "paired rounds", "separate runs", "separate rounds"


def interval_words(alpha: float = DEFAULT_ALPHA) -> str:
    """The one wording of the intervals' level, in every table, footnote and summary: "95% interval"."""
    return f"{1 - alpha:.0%} interval"


def level_note(alpha: float, cells: int) -> str:
    """The footnote every route prints under its table, in the same words."""
    return (f"{interval_words(alpha)}: the intervals of all {cells} compared cell(s) hold together with probability "
            f"at least {1 - alpha:.0%} (each at {1 - per_cell_alpha(alpha, cells):.2%}, Bonferroni); the false-alarm "
            f"bound of the whole comparison is {alpha / 2:.1%}. MDE: the smallest ratio the cell's noise lets it "
            "decide.")


def parse_threshold(text: str) -> float:
    """``"10%"`` or ``"0.1"`` -> 0.1; a bare number >= 1 is ambiguous and refused (ValueError with the fix)."""
    raw = str(text).strip()
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        raise ValueError(f"--threshold {text!r}: not a number; write a percentage such as 10%") from None
    if not raw.endswith("%") and value >= 1:
        raise ValueError(f"--threshold {text!r} is ambiguous; write {raw}% or a fraction such as 0.1")
    if not 0 < value <= 10:
        raise ValueError(f"--threshold {text!r}: must be above 0% and at most 1000%")
    return value


def per_cell_alpha(alpha: float, cells: int) -> float:
    """Each cell's interval level, so that the whole comparison's false-alarm rate stays at most alpha / 2."""
    return alpha / max(1, cells)


def median_interval(values: Sequence[float], alpha: float) -> tuple[float, float, float]:
    """(low, high, coverage): order statistics that hold the median with probability >= 1 - alpha
    (:func:`harness.analysis.stats.median_interval` at that confidence). Too few values for the level: (min, max)
    and the coverage they give, below 1 - alpha (the caller says the cell is undecided)."""
    if not values:
        raise ValueError("an interval needs at least one value")
    _, low, high, coverage = stats.median_interval([float(v) for v in values], 1.0 - alpha)
    return low, high, coverage


def rounds_needed(alpha: float) -> int:
    """The fewest rounds whose extreme ratios hold the median at level 1 - alpha: 2 * 0.5^n <= alpha."""
    return max(1, math.ceil(math.log2(2.0 / alpha)))


def spread(values: Sequence[float]) -> float | None:
    """IQR / median (None for fewer than two values, or a median that is not positive)."""
    if len(values) < 2:
        return None
    summary = stats.summarize(values)
    return summary.iqr_over_median if summary.median is not None and summary.median > 0 else None


@dataclass(frozen=True)
class Verdict:
    """One cell's judgement: the verdict, the ratio head/base with its interval, and the MDE."""

    verdict: str
    ratio: float
    low: float
    high: float
    mde: float
    """max(ratio / low, high / ratio): inf when nothing is decidable."""
    method: str
    """PAIRED, SEPARATE or REPLICATIONS."""
    coverage: float
    """The interval's own coverage (order statistics give a level at or above the one asked; below it: undecided)."""
    n: int
    """Rounds (paired) or the smaller side's sample count."""
    ratio_spread: float | None = None
    """IQR / median of the per-round ratios (paired): the noise the pairing left."""
    allowance: float | None = None
    """The run-to-run factor that widened the interval (separate runs of calls)."""
    reason: str = ""
    """Why the cell is undecided, in words."""

    @property
    def mde_or_none(self) -> float | None:
        return self.mde if math.isfinite(self.mde) else None


def decide(ratio: float, low: float, high: float, threshold: float) -> str:
    """The rule (module docstring): slower, faster, unchanged or undecided, from an interval that has its level."""
    limit = 1.0 + threshold
    if low > 1.0 and ratio > limit:
        return SLOWER
    if high < 1.0 and ratio < 1.0 / limit:
        return FASTER
    if 1.0 / limit <= low and high <= limit:
        return UNCHANGED
    return UNDECIDED


def mde(ratio: float, low: float, high: float) -> float:
    if not (low > 0 and math.isfinite(high)):
        return math.inf
    return max(ratio / low, high / ratio)


def _straddles(ratio: float, low: float, high: float, threshold: float) -> str:
    return (f"the {low:.3f}-{high:.3f} interval straddles the threshold band "
            f"[{1 / (1 + threshold):.3f}, {1 + threshold:.3f}]: MDE {mde(ratio, low, high):.3f}x")


def process_groups(values: Sequence[float], processes: int) -> list[list[float]]:
    """``values`` cut, in order, into ``processes`` runs of (nearly) equal length: the rounds each pair of worker
    processes timed, as ``attnbench ab`` lays them out."""
    n, k = len(values), max(1, min(processes, len(values)))
    bounds = [round(i * n / k) for i in range(k + 1)]
    return [list(values[a:b]) for a, b in zip(bounds, bounds[1:])]


def judge_paired(ratios: Sequence[float], threshold: float, cell_alpha: float, processes: int = 1) -> Verdict:
    """A cell timed in interleaved rounds: its per-round ratios head/base, judged at level 1 - ``cell_alpha``.

    ``processes``: the rounds were spread, in order, over that many pairs of worker processes. Rounds within one
    pair share what the process is (where its buffers landed in memory), so two pairs running the same code can
    differ by more than the rounds of either show; the interval is then widened to hold every pair's median
    ratio, and a verdict is one that every pair of processes supports."""
    xs = [float(r) for r in ratios]
    if not xs or any(not math.isfinite(r) or r <= 0 for r in xs):
        raise ValueError(f"per-round ratios must be positive and finite, got {xs!r}")
    low, high, coverage = median_interval(xs, cell_alpha)
    ratio = statistics.median(xs)
    if processes > 1:
        medians = [statistics.median(g) for g in process_groups(xs, processes) if g]
        low, high = min(low, *medians), max(high, *medians)
    spread_ = spread(xs)
    if coverage < 1.0 - cell_alpha:
        return Verdict(UNDECIDED, ratio, low, high, math.inf, PAIRED, coverage, len(xs), spread_,
                       reason=f"{len(xs)} rounds give only a {coverage:.0%} interval, "
                              f"{rounds_needed(cell_alpha)} are needed: add rounds")
    verdict = decide(ratio, low, high, threshold)
    reason = _straddles(ratio, low, high, threshold) + "; more rounds narrow it" if verdict == UNDECIDED else ""
    return Verdict(verdict, ratio, low, high, mde(ratio, low, high), PAIRED, coverage, len(xs), spread_, reason=reason)


@dataclass(frozen=True)
class Side:
    """One side of a separate comparison: its samples (or only its median), its noise, and its run's load."""

    median: float
    samples: tuple[float, ...] = ()
    iqr_over_median: float | None = None
    load: float | None = None
    cores: int | None = None
    clock: str = "wall"
    """"cpu": timed on a CPU clock, which other processes do not stretch; "wall": elapsed time."""

    @property
    def stretch(self) -> float:
        """How much slower than alone a CPU-bound call can run at this load (the wall clock only)."""
        if self.clock == "cpu" or self.load is None or not self.cores:
            return 1.0
        return max(1.0, self.load / self.cores)

    def describe(self, name: str) -> str:
        parts = [f"{name} IQR {self.iqr_over_median:.0%}" if self.iqr_over_median is not None else f"{name} IQR unknown"]
        if self.clock == "cpu":
            parts.append("CPU clock")
        elif self.load is not None:
            parts.append(f"load {self.load:.1f}" + (f" on {self.cores} cores" if self.cores else ""))
        return ", ".join(parts)


def allowance(base: Side, head: Side) -> float:
    """The factor by which two separate runs of the same code can differ beyond what either run's samples show:
    ``(1 + IQR/median of base + IQR/median of head)`` times the larger load stretch (wall clock only); an
    unknown spread allows anything (infinite)."""
    if base.iqr_over_median is None or head.iqr_over_median is None:
        return math.inf
    return (1.0 + base.iqr_over_median + head.iqr_over_median) * max(base.stretch, head.stretch)


def _median_bounds(side: Side, alpha: float) -> tuple[float, float]:
    """The median's interval from the side's samples at level 1 - alpha; min to max when too few for it."""
    if not side.samples:
        return side.median, side.median
    low, high, _ = median_interval(side.samples, alpha)
    return min(low, side.median), max(high, side.median)


def judge_separate(base: Side, head: Side, threshold: float, cell_alpha: float,
                   replications: bool = False) -> Verdict:
    """Two sample sets timed apart, judged at level 1 - ``cell_alpha``. ``replications``: each sample is an
    independent round (an ``ab`` side file), so no run-to-run allowance is added; otherwise the samples are
    calls of one run and :func:`allowance` widens the interval."""
    if not (base.median > 0 and head.median > 0):
        raise ValueError(f"medians must be positive, got {base.median!r} and {head.median!r}")
    ratio = head.median / base.median
    n = min(len(base.samples), len(head.samples))
    if replications:
        if n < rounds_needed(cell_alpha / 2):
            return Verdict(UNDECIDED, ratio, 0.0, math.inf, math.inf, REPLICATIONS, 0.0, n,
                           reason=f"too few rounds ({len(base.samples)} vs {len(head.samples)}) for a "
                                  f"{1 - cell_alpha:.0%} interval: {rounds_needed(cell_alpha / 2)} a side are needed")
        factor, method = 1.0, REPLICATIONS
    else:
        factor, method = allowance(base, head), SEPARATE
    b_low, b_high = _median_bounds(base, cell_alpha / 2)
    h_low, h_high = _median_bounds(head, cell_alpha / 2)
    low, high = h_low / b_high / factor, h_high / b_low * factor
    if not math.isfinite(factor):
        return Verdict(UNDECIDED, ratio, 0.0, math.inf, math.inf, method, 0.0, n, allowance=None,
                       reason="a side's spread is unknown (no samples, no IQR): nothing bounds the noise")
    verdict = decide(ratio, low, high, threshold)
    reason = ""
    if verdict == UNDECIDED:
        reason = _straddles(ratio, low, high, threshold)
        if method == SEPARATE:
            reason = (f"not comparable: {base.describe('base')}; {head.describe('new')}: the runs' noise allows "
                      f"{factor:.2f}x; {reason}; time both together with `attnbench ab`")
    return Verdict(verdict, ratio, low, high, mde(ratio, low, high), method, 1.0 - cell_alpha, n,
                   allowance=factor if method == SEPARATE else None, reason=reason)
