"""Statistics over rounds: the decision of an A/B comparison timed in interleaved rounds.

The unit of replication is the round, never the sample. In a round each side is timed once
(a few calls), in an order drawn at random, so a change of load hits both sides alike and
the per-round ratio head/base cancels it. Samples inside one run are not independent (they
share that run's load), so no test on raw samples of two runs answers "did the code get slower".

The summary of a cell is the median of its per-round ratios with a distribution-free interval
for that median: the order statistics a sign test inverts (scipy's binomial distribution gives
their ranks). Its coverage needs no model of the noise. When base and head run the same code,
the random order makes head and base exchangeable in every round, so each round's ratio is as
likely above 1 as below it, and the interval's lower end is above 1 with probability at most
``alpha / 2``: the false-alarm bound. Over ``m`` cells the level of each interval is
``alpha / m`` (Bonferroni), so a whole comparison raises a false alarm with probability at
most ``alpha / 2`` whatever the number of cells.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

REGRESSION, IMPROVEMENT, UNCHANGED, UNDECIDED = "regression", "improvement", "unchanged", "undecided"


@dataclass(frozen=True)
class RatioSummary:
    """The per-round ratios of one cell (head over base: above 1 is slower), summarised."""

    ratio: float
    """Median of the per-round ratios."""
    low: float
    high: float
    """The distribution-free interval for that median."""
    level: float
    """The interval's actual coverage (order statistics give a level at or above the one asked)."""
    rounds: int
    p_slower: float
    """One-sided sign-test p-value of "head is not slower" (small: head is slower in most rounds)."""
    spread: float
    """IQR / median of the per-round ratios: the noise the pairing did not cancel."""


def median_interval(values: Sequence[float], alpha: float) -> tuple[float, float, float]:
    """(low, high, level): order statistics that hold the median with probability >= 1 - alpha.

    The k-th smallest and k-th largest value, with k the largest rank whose binomial tail
    P(Bin(n, 1/2) < k) is at most alpha / 2. Too few values for any such k: (min, max) and the
    level they give, below 1 - alpha (the caller says the cell is undecided)."""
    from scipy.stats import binom

    xs = sorted(float(v) for v in values)
    n = len(xs)
    if n == 0:
        raise ValueError("an interval needs at least one round")
    k = 1
    while k + 1 <= (n + 1) // 2 and binom.cdf(k, n, 0.5) <= alpha / 2:
        k += 1
    level = 1.0 - 2.0 * float(binom.cdf(k - 1, n, 0.5))
    return xs[k - 1], xs[n - k], level


def rounds_needed(alpha: float) -> int:
    """The fewest rounds whose extreme ratios hold the median at level 1 - alpha: 2 * 0.5^n <= alpha."""
    return max(1, math.ceil(math.log2(2.0 / alpha)))


def summarize_ratios(ratios: Sequence[float], alpha: float) -> RatioSummary:
    """The cell's summary from its per-round ratios, at interval level 1 - ``alpha``."""
    from scipy.stats import binomtest

    xs = [float(r) for r in ratios]
    if not xs or any(not math.isfinite(r) or r <= 0 for r in xs):
        raise ValueError(f"per-round ratios must be positive and finite, got {xs!r}")
    low, high, level = median_interval(xs, alpha)
    ratio = statistics.median(xs)
    above = sum(r > 1 for r in xs)
    moved = sum(r != 1 for r in xs)
    p = float(binomtest(above, moved, 0.5, alternative="greater").pvalue) if moved else 1.0
    q1, _, q3 = statistics.quantiles(xs, n=4, method="inclusive") if len(xs) > 1 else (ratio, ratio, ratio)
    return RatioSummary(ratio=ratio, low=low, high=high, level=level, rounds=len(xs), p_slower=p,
                        spread=(q3 - q1) / ratio)


def decide(summary: RatioSummary, threshold: float, alpha: float) -> str:
    """The verdict of one cell.

    - regression: the median ratio is beyond ``1 + threshold`` and the interval excludes 1
      (no-regression is outside it);
    - improvement: symmetrically, below ``1 / (1 + threshold)`` with the interval below 1;
    - unchanged: the interval lies inside ``[1 / (1 + threshold), 1 + threshold]``;
    - undecided: anything else (too few rounds for the level, or an interval that straddles the
      threshold): never a failure, but said.
    """
    if summary.level < 1.0 - alpha:
        return UNDECIDED
    limit = 1.0 + threshold
    if summary.ratio > limit and summary.low > 1.0:
        return REGRESSION
    if summary.ratio < 1.0 / limit and summary.high < 1.0:
        return IMPROVEMENT
    if 1.0 / limit <= summary.low and summary.high <= limit:
        return UNCHANGED
    return UNDECIDED


def per_cell_alpha(alpha: float, cells: int) -> float:
    """Each cell's interval level, so that the whole comparison's false-alarm rate stays at most alpha / 2."""
    return alpha / max(1, cells)


@dataclass(frozen=True)
class RunNoise:
    """What one stored run saw of a cell: the spread of its samples, and the machine's load while it ran."""

    iqr_over_median: float | None
    load: float | None = None
    cores: int | None = None

    @property
    def stretch(self) -> float:
        """How much slower than alone a CPU-bound call can run at this load: its fair share of the cores."""
        if self.load is None or not self.cores:
            return 1.0
        return max(1.0, self.load / self.cores)

    def describe(self, side: str) -> str:
        parts = [f"{side} IQR {self.iqr_over_median:.0%}" if self.iqr_over_median is not None else f"{side} IQR unknown"]
        if self.load is not None:
            parts.append(f"load {self.load:.1f}" + (f" on {self.cores} cores" if self.cores else ""))
        return ", ".join(parts)


def noise_allowance(base: RunNoise, new: RunNoise) -> float:
    """The factor by which two runs of the same code can differ from what each run saw alone.

    Two separate runs share no load, so nothing pairs their samples: their medians can differ by
    their spreads, and each can be stretched by its own load (a run at load 6 on 2 cores gets a third
    of a core when it is not alone). The factor is ``(1 + IQR_base/median + IQR_new/median)`` times the
    larger of the two stretches; an unknown spread counts as the threshold-sized worst case (infinite)."""
    if base.iqr_over_median is None or new.iqr_over_median is None:
        return math.inf
    return (1.0 + base.iqr_over_median + new.iqr_over_median) * max(base.stretch, new.stretch)


def decide_runs(ratio: float, allowance: float, threshold: float) -> str:
    """The verdict on two separate runs' ratio of medians, given the noise allowance.

    A regression only when even the noise cannot bring the ratio back within the threshold
    (``ratio / allowance > 1 + threshold``); unchanged only when the noise cannot carry it beyond
    (``[ratio / allowance, ratio * allowance]`` inside the threshold band); otherwise undecided."""
    limit = 1.0 + threshold
    low, high = ratio / allowance, ratio * allowance
    if low > limit:
        return REGRESSION
    if high < 1.0 / limit:
        return IMPROVEMENT
    if 1.0 / limit <= low and high <= limit:
        return UNCHANGED
    return UNDECIDED
