"""The axes sweeps run along (:data:`AXES`), the memory a call needs, and a plain log-log slope.

``fit_exponent`` fits ``log y = slope * log x + intercept`` by least squares. At small sizes
fixed costs (Python dispatch, thread wake-up, allocation) dominate and flatten the curve,
which would drag the slope down; those leading points are left out by a stated rule
(:data:`OVERHEAD_RULE`) and reported in ``excluded``, never silently.

The sweeps themselves are fitted in one place, with the cost model (:mod:`harness.analysis.sweepfits`): bench
stores and prints those fits, the report reads them. ``fit_exponent`` is the plain slope the suites' and the
benchmarks' checks of their own targets use.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from harness.results.schema import BenchCell

MIN_POINTS = 3
OVERHEAD_FRACTION = 0.75
OVERHEAD_RULE = (
    f"the smallest sizes are left out while the slope from one size to the next is below "
    f"{OVERHEAD_FRACTION:g}x the slope fitted over the larger sizes (fixed overhead flattens the "
    f"small end); at least {MIN_POINTS} points are always kept"
)


@dataclass
class Fit:
    """A log-log least-squares fit y ~ exp(intercept) * x^slope."""

    slope: float
    intercept: float
    r2: float
    n: int
    used: list[tuple[float, float]] = field(default_factory=list)
    excluded: list[tuple[float, float]] = field(default_factory=list)
    rule: str = OVERHEAD_RULE

    def to_dict(self) -> dict[str, object]:
        return {"slope": self.slope, "intercept": self.intercept, "r2": self.r2, "n": self.n,
                "used": [list(p) for p in self.used], "excluded": [list(p) for p in self.excluded],
                "rule": self.rule}


def _least_squares(points: Sequence[tuple[float, float]]) -> tuple[float, float, float]:
    """(slope, intercept, r2) of log y against log x."""
    lx = [math.log(x) for x, _ in points]
    ly = [math.log(y) for _, y in points]
    n = len(points)
    mx, my = sum(lx) / n, sum(ly) / n
    sxx = sum((a - mx) ** 2 for a in lx)
    if sxx == 0:
        raise ValueError("every x is the same; a slope needs at least two distinct sizes")
    slope = sum((a - mx) * (b - my) for a, b in zip(lx, ly)) / sxx
    intercept = my - slope * mx
    ss_tot = sum((b - my) ** 2 for b in ly)
    ss_res = sum((b - (slope * a + intercept)) ** 2 for a, b in zip(lx, ly))
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else 1.0
    return slope, intercept, r2


def fit_exponent(xs: Sequence[float], ys: Sequence[float], *, drop_overhead: bool = True) -> Fit:
    """The log-log slope of ys against xs, leading overhead-dominated points left out (see OVERHEAD_RULE)."""
    if len(xs) != len(ys):
        raise ValueError(f"xs and ys differ in length ({len(xs)} and {len(ys)})")
    points = sorted((float(x), float(y)) for x, y in zip(xs, ys))
    bad = [p for p in points if p[0] <= 0 or p[1] <= 0]
    if bad:
        raise ValueError(f"log-log fit needs positive values; got {bad}")
    if len({x for x, _ in points}) < 2:
        raise ValueError("a slope needs at least two distinct sizes")
    excluded: list[tuple[float, float]] = []
    while drop_overhead and len(points) > MIN_POINTS and len({x for x, _ in points[1:]}) >= 2:
        rest_slope = _least_squares(points[1:])[0]
        (x0, y0) = points[0]
        x1, y1 = next(p for p in points[1:] if p[0] > x0)  # repeated sizes (same work, other shape) are no step
        step = math.log(y1 / y0) / math.log(x1 / x0)
        if rest_slope > 0 and step < OVERHEAD_FRACTION * rest_slope:
            excluded.append(points.pop(0))
        else:
            break
    slope, intercept, r2 = _least_squares(points)
    return Fit(slope, intercept, r2, len(points), points, excluded)


@dataclass(frozen=True)
class Axis:
    """One axis a sweep runs along: the case fields that move together on it (the first is the size plotted and
    fitted), which cases lie on it, and how time grows along it in theory. :data:`AXES` is the one list of them:
    the cost-model sweeps bench fits and the report reads (:mod:`harness.analysis.slices`,
    :mod:`harness.analysis.sweepfits`) read it."""

    name: str
    fields: tuple[str, ...]
    time_theory: float
    """The exponent of time in the size: T^2 for a square case, linear in d, heads, a decode step's Tk, the
    width of a sliding window."""

    @property
    def size(self) -> str:
        return self.fields[0]

    def holds(self, tq: int, tk: int, heads: int, kv_heads: int) -> bool:
        """Whether a case lies on the axis: "T" takes square cases (Tq = Tk), "Tk" decode steps (a few queries,
        Tq < Tk, against a growing cache), "heads" cases with as many key heads as query heads."""
        if self.name == "T":
            return tq == tk
        if self.name == "Tk":
            return tq < tk
        return self.name != "heads" or kv_heads == heads


AXES = {axis.name: axis for axis in (Axis("T", ("tq", "tk"), 2.0), Axis("d", ("d",), 1.0),
                                     Axis("heads", ("heads", "kv_heads"), 1.0), Axis("Tk", ("tk",), 1.0),
                                     Axis("window", ("window",), 1.0))}
"""Every fit axis, by name."""


def call_footprint(cell: BenchCell) -> int | None:
    """The memory a call needs: what it returns plus the extra at its peak (None when not measured).

    Memory exponents are fitted on this, not on the extra alone: a tiled kernel's extra is a few
    fixed-size tiles, O(1), and only with its O(T) output does it show FlashAttention's O(T).
    """
    memory = cell.memory
    if memory is None or memory.peak_extra_bytes is None:
        return None
    return int(memory.peak_extra_bytes) + int(memory.output_bytes or 0) or None
