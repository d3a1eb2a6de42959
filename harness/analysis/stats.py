"""Summary statistics of raw timing samples, shared by `bench`, `report` and `compare`.

Robust statistics first: on a shared, noisy machine the median and the interquartile
range describe a run better than mean and standard deviation, which one preempted call
can drag anywhere. Both are kept, with the raw samples, so a reader can judge.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterator, Sequence

from harness.results.records import Stats

NOISY_IQR_OVER_MEDIAN = 0.10
"""IQR/median at or above this marks a measurement as noisy (bench warns)."""


def quantile(sorted_xs: Sequence[float], q: float) -> float:
    """Linear-interpolation quantile (NumPy's default method) of already sorted data."""
    if not sorted_xs:
        raise ValueError("quantile of no samples")
    pos = (len(sorted_xs) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_xs) - 1)
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * (pos - lo)


def summarize(samples: Sequence[float]) -> Stats:
    """median, iqr, min, mean, stdev, iqr_over_median and n of ``samples`` (seconds, or anything).

    stdev is the sample standard deviation (0 for a single sample).
    """
    xs = sorted(float(x) for x in samples)
    if not xs:
        raise ValueError("summarize needs at least one sample")
    median = quantile(xs, 0.5)
    iqr = quantile(xs, 0.75) - quantile(xs, 0.25)
    return Stats(median=median, iqr=iqr, min=xs[0], mean=statistics.fmean(xs),
                 stdev=statistics.stdev(xs) if len(xs) > 1 else 0.0,
                 iqr_over_median=iqr / median if median > 0 else math.inf, n=len(xs))


def is_noisy(stats: Stats | None) -> bool:
    """True when the spread is too large to trust small differences (IQR/median >= 10%)."""
    return stats is not None and stats.iqr_over_median is not None and stats.iqr_over_median >= NOISY_IQR_OVER_MEDIAN


BUSY_LOAD_PER_CPU = 0.75
"""A load average at or above this share of the CPUs is a busy machine: other work waits for a core."""
OTHER_LOAD = 0.5
"""Load beyond the run's own threads that makes a machine busy: half a core of other work, on average."""


def noise_cause(loads: Sequence[float | None], cpus: int | None, threads: int | None = None) -> str:
    """Why cells were noisy, in words, from the load averages measured while they ran: the machine is blamed only
    when it measured busy, beyond what the run's own ``threads`` put there (a run timing 2 threads on 2 cores makes
    a load of 2 itself); otherwise the calls themselves varied."""
    measured = [x for x in loads if x is not None]
    if not measured or not cpus:
        return "no load was measured, so the cause is unknown"
    worst = max(measured)
    own = min(threads or 0, cpus)
    if worst >= max(BUSY_LOAD_PER_CPU * cpus, own + OTHER_LOAD):
        return f"the machine was busy (load up to {worst:.1f} on {cpus} CPUs" + (
            f", the run's own {own} threads included)" if own else ")")
    return (f"the machine was not busy (load at most {worst:.1f} on {cpus} CPUs" + (
            f", the run's own {own} threads included" if own else "") + "): the calls themselves varied "
            "(short calls, data-dependent work, frequency changes, memory the calls map afresh)")


PAIRED_CONFIDENCE = 0.95
"""The coverage a median interval aims for (reached from 6 values on: min to max of 6 covers 96.9%, of 5 93.8%)."""


def half_binomial_cdf(n: int) -> Iterator[float]:
    """``P(Binom(n, 1/2) <= j)`` for j = 0, 1, 2, ...: exact (integer sums, one rounding) up to n = 1,024,
    from log-probabilities beyond. What :func:`median_interval` asks of SciPy's ``binom.cdf``, without its import
    (0.5 s of CPU in every command that judges a ratio)."""
    if n <= 1024:
        total, term, whole = 0, 1, 1 << n  # term: C(n, j)
        for j in range(n + 1):
            total += term
            yield total / whole
            term = term * (n - j) // (j + 1)
        return
    log_total, half = math.lgamma(n + 1), n * math.log(0.5)
    cumulative = 0.0
    for j in range(n + 1):
        cumulative += math.exp(log_total - math.lgamma(j + 1) - math.lgamma(n - j + 1) + half)
        yield min(cumulative, 1.0)


def median_interval(xs: Sequence[float], confidence: float = PAIRED_CONFIDENCE) -> tuple[float, float, float, float]:
    """(median, low, high, coverage) of ``xs``: the distribution-free interval for the median from the order
    statistics, the narrowest [x_(k), x_(n+1-k)] whose exact coverage ``1 - 2 P(Binom(n, 1/2) < k)`` is at least
    ``confidence``; with too few values for that, the widest (min to max) and its lower coverage.

    Why this and not a bootstrap: per-round ratios are few (5 to 9), and an interval from order
    statistics is exact for any distribution at any n, and deterministic."""
    values = sorted(float(x) for x in xs)
    n = len(values)
    if n == 0:
        raise ValueError("median_interval needs at least one value")
    cdf = half_binomial_cdf(n)
    below = next(cdf)  # P(X < k) for k = 1
    k = 1
    while k + 1 <= (n + 1) // 2:
        at_k = next(cdf)  # P(X <= k) = P(X < k + 1)
        if 1 - 2 * at_k < confidence:
            break
        k, below = k + 1, at_k
    coverage = 1 - 2 * below
    return quantile(values, 0.5), values[k - 1], values[n - k], coverage
