"""Steps in a series of measurements across commits: a penalised piecewise-constant fit, as asv does.

A pairwise threshold (this commit against the one before) fires on every noisy pair and misses
a slow-down that lands in two halves. The series is instead fitted as a few constant levels:
the levels and the points where they change minimise

    sum_i ((z_i - level(i)) / sigma_i)^2  +  PENALTY(n) * (number of levels),

with z the log of each commit's median (ratios, not differences, are what matter) and sigma_i
each point's noise: its own median's standard error from its raw samples, and the scatter the
series shows from one commit to the next (a robust estimate: 1.4826 x the median absolute
difference of neighbours, over sqrt 2), which is what a rerun on another day adds. The optimum
is found exactly by dynamic programming (Jackson et al.'s optimal partitioning). Changes smaller
than :data:`MIN_RATIO` are merged away: below that a step is not worth a reader's time.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

MIN_RATIO = 1.05
"""A step changes the level by at least this factor (5%), up or down."""
NOISE_FLOOR = 0.005
"""Relative noise assumed at least (0.5%): a series of identical numbers has no zero-width levels."""


def penalty(n: int) -> float:
    """The cost of one more level: above the largest chance drop in the fit over n candidate places."""
    return 2.0 * math.log(max(n, 2)) + 6.0


@dataclass(frozen=True)
class Step:
    index: int
    """The first point of the new level."""
    label: str
    """That point's label (its commit)."""
    before: float
    after: float
    """The levels either side (in the series' units: the geometric mean of each level's points)."""

    @property
    def ratio(self) -> float:
        """after / before: above 1 a slow-down when the series is a time."""
        return self.after / self.before


def _log_se(samples: Sequence[float] | None) -> float:
    """The standard error of log(median) from raw samples (0 without any)."""
    if not samples or len(samples) < 2:
        return 0.0
    logs = np.log(np.asarray(samples, dtype=float))
    mad = float(np.median(np.abs(logs - np.median(logs))))
    return 1.2533 * 1.4826 * mad / math.sqrt(len(logs))  # the median's efficiency relative to the mean


def _partition(z: np.ndarray, w: np.ndarray, beta: float) -> list[int]:
    """Start indices of the optimal levels (the first is 0)."""
    n = len(z)
    cw = np.concatenate([[0.0], np.cumsum(w)])
    cz = np.concatenate([[0.0], np.cumsum(w * z)])
    czz = np.concatenate([[0.0], np.cumsum(w * z * z)])
    best = np.zeros(n + 1)
    start = np.zeros(n + 1, dtype=int)
    for j in range(1, n + 1):
        i = np.arange(j)
        sw, sz, szz = cw[j] - cw[i], cz[j] - cz[i], czz[j] - czz[i]
        cost = best[i] + szz - sz * sz / sw + beta
        k = int(np.argmin(cost))
        best[j], start[j] = cost[k], k
    cuts, j = [], n
    while j > 0:
        cuts.append(int(start[j]))
        j = int(start[j])
    return sorted(cuts)


def _level(z: np.ndarray, w: np.ndarray, a: int, b: int) -> float:
    return float((w[a:b] * z[a:b]).sum() / w[a:b].sum())


def detect_steps(values: Sequence[float], labels: Sequence[str] | None = None,
                 samples: Sequence[Sequence[float] | None] | None = None) -> list[Step]:
    """The steps of a positive series (e.g. one cell's median time at each commit, oldest first)."""
    y = np.asarray(values, dtype=float)
    n = len(y)
    names = list(labels) if labels is not None else [str(i) for i in range(n)]
    if n < 2 or (y <= 0).any() or not np.isfinite(y).all():
        return []
    z = np.log(y)
    between = 1.4826 * float(np.median(np.abs(np.diff(z)))) / math.sqrt(2) if n > 2 else 0.0
    se = np.array([_log_se(s) for s in samples]) if samples is not None else np.zeros(n)
    sigma = np.sqrt(se ** 2 + between ** 2 + NOISE_FLOOR ** 2)
    w = 1.0 / sigma ** 2
    cuts = _partition(z, w, penalty(n))
    while len(cuts) > 1:  # merge away the smallest change while it is below MIN_RATIO
        bounds = [*cuts, n]
        levels = [_level(z, w, a, b) for a, b in zip(bounds, bounds[1:])]
        jumps = [abs(b - a) for a, b in zip(levels, levels[1:])]
        smallest = int(np.argmin(jumps))
        if jumps[smallest] >= math.log(MIN_RATIO):
            break
        del cuts[smallest + 1]
    bounds = [*cuts, n]
    levels = [_level(z, w, a, b) for a, b in zip(bounds, bounds[1:])]
    return [Step(index=cut, label=names[cut], before=math.exp(levels[i]), after=math.exp(levels[i + 1]))
            for i, cut in enumerate(cuts[1:])]
