"""How a fitted cost grows against theory: the verdict on one implementation's fit along one sweep.

A :class:`Row` holds a cost-model fit (:mod:`harness.analysis.costmodel`) with its theory and says whether the
cost grows faster than the algorithm allows (``flagged``), departs from it where a cache or a block size moves
the per-FLOP rate (``departure``), or cannot be told from the next order with the sizes run (``undecided``).
Where bench timed the cells in rounds beside a reference, the growth relative to it (:class:`Relative`) is
judged instead: load cancels in each per-round ratio. Nothing here reads a table or a file; the report's
sweeps (:mod:`harness.analysis.sweepfits`) build the rows.

It is one module because a row's verdict is one decision: flagged, departure, undecided
and the check text read each other's conditions in a fixed order, and split apart they would each re-derive them.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from harness.analysis.costmodel import CostFit
from harness.analysis.scaling import MIN_POINTS  # fewer fitted sizes than this: shown, not judged

EXCESS = 0.5
"""A time exponent this far above theory, over the whole sweep, is an excess of the cost's order (an O(T^3) where
O(T^2) is due gives 1); a cache effect or a block size moves the per-FLOP rate by a bounded factor between two
sizes, which over a sweep of 8x shows as a fraction of this, concentrated in one step."""
MAX_INTERVAL_WIDTH = 1.0
"""An exponent whose 95% interval is wider than this (high - low, in exponent) is undecided, never "ok": it cannot
tell an order from the next (O(T^2) from O(T^3)), whatever theory it holds."""
MAX_FALL = 1.10
"""A time sweep whose time falls by more than this factor from one size to a larger one is not judged."""
SCORE_SHARE = 0.25
"""A kernel that materialises the scores holds at least one head's (Tq, Tk) matrix; memory of a linear-memory kernel
growing faster than T while its peak at the largest size stays under this share of that one matrix is its tiles
growing with T below their block size (a tile as large as the sequence at small T), a departure, not a flag."""
MEMORY_EXPONENT = {"quadratic": 2.0, "linear": 1.0}
"""Theory for peak memory in T, from the ``memory=`` each implementation declares at registration
(recorded by bench in the result file's "implementations")."""


def memory_theory(name: str, info: Mapping[str, object] | None = None) -> float | None:
    """2 for an implementation that declared memory="quadratic", 1 for "linear", None when undeclared."""
    info = info or {}
    exponent = info.get("memory_exponent")
    if isinstance(exponent, (int, float)):
        return float(exponent)
    return MEMORY_EXPONENT.get(str(info.get("memory")))


@dataclass(frozen=True)
class Relative:
    """An implementation's time over the reference contender's, timed with it in interleaved rounds at each size
    (the per-round ratios' median and interval, stored by bench), fitted against the size: the exponent by which it
    grows faster than the reference. Load cancels in each ratio, so this reads alike on an idle and a busy machine."""

    reference: str
    exponent: float
    """The growth from the smallest size's ratio to the largest's (log-log)."""
    low: float
    high: float
    """The slowest and fastest growth the sizes' intervals allow, between the smallest and the largest size."""
    xs: tuple[float, ...] = ()
    ratios: tuple[float, ...] = ()
    """The sizes and each one's paired ratio (the median of its rounds' ratios)."""


def relative_growth(xs: Sequence[float], ratios: Sequence[float], lows: Sequence[float], highs: Sequence[float],
                    reference: str) -> Relative | None:
    """:class:`Relative` from each size's paired ratio and interval (None with fewer than :data:`MIN_POINTS` sizes)."""
    points = sorted((float(x), float(r), float(lo), float(hi)) for x, r, lo, hi in zip(xs, ratios, lows, highs)
                    if r > 0 and lo > 0 and hi > 0)
    if len({p[0] for p in points}) < MIN_POINTS:
        return None
    (x0, r0, lo0, hi0), (x1, r1, lo1, hi1) = points[0], points[-1]
    span = math.log(x1 / x0)
    return Relative(reference, math.log(r1 / r0) / span, math.log(lo1 / hi0) / span, math.log(hi1 / lo0) / span,
                    tuple(p[0] for p in points), tuple(p[1] for p in points))


def sustained(xs: Sequence[float], ys: Sequence[float], theory: float) -> bool:
    """The local exponent (log-log slope from one size to the next) exceeds ``theory + EXCESS`` at two steps or
    more, or at every step when there are fewer than two: growth of an order, not one step of a cache or block."""
    steps = [math.log(y1 / y0) / math.log(x1 / x0) for (x0, y0), (x1, y1) in zip(zip(xs, ys), list(zip(xs, ys))[1:])
             if x1 > x0 and y0 > 0 and y1 > 0]
    above = sum(step > theory + EXCESS for step in steps)
    return bool(steps) and above >= min(2, len(steps))


def largest_rate_fall(xs: Sequence[float], ys: Sequence[float], theory: float) -> tuple[float, float, float] | None:
    """(smaller size, larger size, fraction) of the largest fall of the per-work rate (x^theory / y) from one size
    to the next; None when it never falls."""
    worst = None
    for (x0, y0), (x1, y1) in zip(zip(xs, ys), list(zip(xs, ys))[1:]):
        fall = 1.0 - (x1 ** theory / y1) / (x0 ** theory / y0)
        if fall > 0 and (worst is None or fall > worst[2]):
            worst = (x0, x1, fall)
    return worst


@dataclass(frozen=True)
class Row:
    """One implementation's cost-model fit along one sweep, and its verdict against theory."""

    implementation: str
    quantity: str
    """"time" or "memory"."""
    axis: str
    theory: float | None
    sweep: str = ""
    fit: CostFit | None = None
    relative: Relative | None = None
    """Time only, where the cells were timed in rounds beside a reference: growth relative to it."""
    scores_bytes: float | None = None
    """Memory in T only: the bytes of one head's (Tq, Tk) score matrix at the largest size, in the case's dtype."""
    points: int = 0
    """The distinct sizes the sweep had, where no fit was made (fewer than :data:`MIN_POINTS`: :func:`too_few`)."""

    @property
    def slope(self) -> float | None:
        """The fitted leading exponent (the name the complexity table has always used)."""
        return None if self.fit is None else self.fit.exponent

    @property
    def low(self) -> float | None:
        return None if self.fit is None else self.fit.low

    @property
    def high(self) -> float | None:
        return None if self.fit is None else self.fit.high

    @property
    def r2(self) -> float | None:
        return None if self.fit is None else self.fit.r2

    @property
    def n(self) -> int:
        return self.points if self.fit is None else self.fit.n

    @property
    def too_few(self) -> bool:
        """Fewer than :data:`MIN_POINTS` distinct sizes: no exponent is fitted from them."""
        return self.n < MIN_POINTS

    @property
    def off_by(self) -> float | None:
        if self.slope is None or self.theory is None:
            return None
        return self.slope - self.theory

    @property
    def upper_bound_only(self) -> bool:
        """A tiled kernel's O(T) memory is a bound: its fixed-size tiles may dominate at the sizes run,
        which is no fault; only growth faster than T is."""
        return self.quantity == "memory" and self.theory == MEMORY_EXPONENT["linear"]

    @property
    def fall(self) -> tuple[float, float, float] | None:
        """For time: (smaller size, larger size, ratio) of the largest fall of time as the size grows, when it is
        beyond :data:`MAX_FALL`. More work never takes less time: such a sweep was disturbed (the machine's
        load changed between its cells), and its exponent is not judged."""
        if self.quantity != "time" or self.fit is None:
            return None
        ys = self.fit.ys
        worst = max(((i, j) for i in range(len(ys)) for j in range(i + 1, len(ys))),
                    key=lambda ij: ys[ij[0]] / ys[ij[1]], default=None)
        if worst is None or ys[worst[0]] / ys[worst[1]] <= MAX_FALL:
            return None
        i, j = worst
        return self.fit.xs[i], self.fit.xs[j], ys[j] / ys[i]

    @property
    def judged(self) -> bool:
        """Theory is known, enough sizes were fitted, and either the growth relative to a reference timed beside
        the cells is known (load cancels in it), or the leading term dominates at two or more sizes and (time)
        the sweep does not fall as the size grows."""
        if self.fit is None or self.theory is None or self.n < MIN_POINTS:
            return False
        return self.relative is not None or (self.fit.reached and self.fall is None)

    @property
    def flagged(self) -> bool:
        """The cost grows faster than theory allows. Memory: theory outside the exponent's interval where the
        leading term dominates (a linear-memory bound: only when the interval lies above it). Time: growth of
        at least :data:`EXCESS` beyond theory, which the noise cannot explain and which is sustained: relative
        to the reference timed beside it when bench stored paired ratios (the lower end of :class:`Relative`
        above :data:`EXCESS`), else the whole interval :data:`EXCESS` or more above theory; and from one size
        to the next at two steps or more (at every step of a two-step sweep). An excess concentrated in one
        step (a cache level left, a block size) is a :attr:`departure`, described and never flagged."""
        if not self.judged or self.fit is None or self.theory is None:
            return False
        if self.quantity == "memory":
            if self.upper_bound_only:
                return self.fit.low > self.theory and self.tiles_share is None
            return not self.fit.contains(self.theory)
        if self.relative is not None:
            return self.relative.low > EXCESS and sustained(self.relative.xs, self.relative.ratios, 0.0)
        if self.fit.high < self.theory - EXCESS:  # half an order less work than the algorithm's: not a dense kernel
            return True
        return self.fit.low > self.theory + EXCESS and sustained(self.fit.xs, self.fit.ys, self.theory)

    @property
    def tiles_share(self) -> float | None:
        """For a linear-memory bound whose memory grows faster than T: the share of one head's (Tq, Tk) score matrix
        its peak holds at the largest size, when under :data:`SCORE_SHARE` (None otherwise): no matrix of scores
        was materialised there, so the growth is tiles that still grow with T (below their block size)."""
        if not self.upper_bound_only or self.fit is None or self.theory is None or not self.scores_bytes:
            return None
        if not self.fit.low > self.theory or not self.fit.ys:
            return None
        xs, ys = self.fit.xs, self.fit.ys
        largest = max(range(len(xs)), key=lambda i: xs[i]) if xs else len(ys) - 1
        share = float(ys[largest]) / self.scores_bytes
        return share if share < SCORE_SHARE else None

    @property
    def departure(self) -> str | None:
        """For time judged and not flagged: where the per-work rate falls most from one size to the next, when
        the exponent's interval lies above theory ("per-FLOP rate falls 40% from d 64 to 128"): how a real kernel's
        cost departs from the algorithm's (caches, block sizes), not a fault. For a linear-memory bound: growth
        faster than T that stays under :data:`SCORE_SHARE` of one head's score matrix (:attr:`tiles_share`)."""
        if self.quantity == "memory" and self.judged and self.fit is not None and self.fit.xs:
            share = self.tiles_share
            if share is None:
                return None
            return (f"memory grows faster than T yet holds {share:.0%} of one head's T×T scores at {self.axis} "
                    f"{max(self.fit.xs):g}: tiles growing with T below their block size, no score matrix")
        if self.quantity != "time" or not self.judged or self.flagged or self.fit is None or self.theory is None:
            return None
        if not self.fit.low > self.theory:
            return None
        fall = largest_rate_fall(self.fit.xs, self.fit.ys, self.theory)
        if fall is None:
            return None
        return f"per-FLOP rate falls {fall[2]:.0%} from {self.axis} {fall[0]:g} to {fall[1]:g}"

    @property
    def undecided(self) -> bool:
        """Judged, not flagged, and the sizes run cannot tell the exponent's order (:attr:`undecided_reason`): the
        report says so instead of "ok"."""
        return self.undecided_reason is not None

    @property
    def undecided_reason(self) -> str | None:
        """Why a judged, unflagged exponent is undecided: it sits at the bound of the exponents searched
        (:attr:`~harness.analysis.costmodel.CostFit.at_bound`); unless it is a :attr:`departure`, the interval holds
        both theory and theory + 1 (time; memory: the other of 1 and 2; for time judged against a reference timed
        beside it, when that growth's interval holds both none and :data:`EXCESS` while the fit's holds theory + 1),
        or it is wider than :data:`MAX_INTERVAL_WIDTH`. None otherwise."""
        if not self.judged or self.flagged or self.fit is None or self.theory is None:
            return None
        fit = self.fit
        if (bound := fit.at_bound) is not None:
            return f"exponent {fit.exponent:.2f} at the fit's bound {bound:g}"
        if self.departure:  # described where the rate falls: not "ok" either
            return None
        holds = f"[{fit.low:.2f}, {fit.high:.2f}] holds {self.theory:g} and its neighbour"
        if self.quantity == "time" and self.relative is not None:
            if self.relative.low <= EXCESS < self.relative.high and fit.contains(self.theory + 1.0):
                return holds
        else:
            other = self.theory + 1.0 if self.quantity == "time" or self.theory < 2 else self.theory - 1.0
            if fit.contains(self.theory) and fit.contains(other):
                return holds
        if fit.high - fit.low > MAX_INTERVAL_WIDTH:
            return f"interval [{fit.low:.2f}, {fit.high:.2f}] wider than {MAX_INTERVAL_WIDTH:g}"
        return None

    @property
    def dominates(self) -> str:
        """Where the leading term is most of the fitted value: "3 of 4 sizes" (empty without a fit)."""
        return "" if self.fit is None else f"{self.fit.lead_points} of {self.fit.n} sizes"

    @property
    def check(self) -> str:
        if self.fit is None or self.too_few:
            return f"too few points ({self.n} < {MIN_POINTS}): no fit"
        if self.theory is None:
            return "no theory"
        if self.relative is None and not self.fit.reached:
            return "leading term not reached"
        if self.relative is None and (fall := self.fall) is not None:
            return f"time falls ×{fall[2]:.2f} from {fall[0]:g} to {fall[1]:g}: not judged"
        if self.flagged:
            relative = self.relative
            return "OFF" if relative is None else \
                f"OFF: grows {self.axis}^{relative.exponent:.2f} faster than {relative.reference} beside it"
        if (reason := self.undecided_reason) is not None:
            return f"undecided: {reason}"
        if (departure := self.departure) is not None:
            return f"departure: {departure}"
        return f"ok (≤ {self.theory:g})" if self.upper_bound_only and self.fit.high < self.theory else "ok"

    def as_dict(self) -> dict[str, Any]:
        """The row for complexity.csv; exponents to 3 decimals (finer digits are noise, and vary with the BLAS)."""
        return {"implementation": self.implementation, "quantity": self.quantity, "axis": self.axis,
                "exponent": _round(self.slope, 3), "low": _round(self.low, 3), "high": _round(self.high, 3),
                "theory": self.theory, "off_by": _round(self.off_by, 3), "flagged": self.flagged, "check": self.check,
                "dominates": self.dominates, "regimes": "" if self.fit is None else " ".join(self.fit.regimes),
                "model": "" if self.fit is None else model_text(self.fit), "r2": _round(self.r2, 4), "n": self.n,
                "sweep": self.sweep}


def without_short_fit(row: Row) -> Row:
    """``row`` with no fit where its sweep had fewer than :data:`MIN_POINTS` distinct sizes (a file may have stored
    one): no exponent is shown from too few points."""
    if row.fit is None or row.fit.n >= MIN_POINTS:
        return row
    return dataclasses.replace(row, fit=None, relative=None, points=row.fit.n)


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(float(value), digits)


def model_text(fit: CostFit) -> str:
    """The fitted model as a formula in x, e.g. ``2.1e-05 + 3.3e-10·x^2.03`` (terms with coefficient 0 left out)."""
    *lower, lead = fit.coefs
    terms = [f"{c:.3g}" if k == 0 else f"{c:.3g}·x" if k == 1 else f"{c:.3g}·x^{k}"
             for c, k in zip(lower, fit.lower_terms) if c > 0]
    if lead > 0:
        terms.append(f"{lead:.3g}·x^{fit.exponent:.2f}")
    return " + ".join(terms) or "0"
