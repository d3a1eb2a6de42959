"""Cost models for a sweep: lower-order terms plus one leading power term, fitted non-negatively.

A single power law cannot show an algorithm's exponent over the sizes a benchmark can afford:
at T = 1,024 the softmax's O(T^2) work and per-call fixed costs are most of the time of a
d sweep, so time against d looks flat although the GEMMs grow as d. The model here is

    y(x) = c_0 + c_1 x + ... + c_{k-1} x^{k-1} + A x^p,    every c_j >= 0, A >= 0,

the lower-order terms being the integer powers below the theory exponent (for the d sweep at
fixed T the O(T^2) softmax term is constant in d, so c_0 absorbs it). p is the leading
exponent. Residuals are relative ((fit - y) / y), because times span decades. For each
candidate p on a grid the coefficients are a non-negative least-squares problem, solved
exactly by trying every set of active terms (at most four columns), so thousands of fits
cost a few batched NumPy solves; the best grid p is refined with a bounded scalar search.

The interval for p is a percentile bootstrap over the raw samples the result file keeps
(each size's samples resampled, its median taken, the model refitted), with the drift between
cells put on top: a cell's samples show the noise within it, not the change of the machine's
load from one cell to the next, which is what bends a sweep on a busy machine. The run's own
scatter around its cost models (:func:`run_scatter`) measures that drift; a time that falls as
the size grows shows at least that much in its own sweep (:func:`falls`); and a cell whose own
samples spread widely (the load changed while it ran) may differ from the next cell as much.
Without samples (memory) a fit with sizes to spare resamples its own residuals instead. The
interval is joined with the leave-one-size-out estimates (a single size that bends the curve
shows) and with the plain log-log slope over the sizes where the leading term dominates, overall
and between the two largest (the reading in which lower-order costs overlap the leading one, a
wait hidden by work, or an offset of either sign, instead of adding to it; also the asymptotic
reading when the per-element cost steps up once, as when a T x T working set leaves the cache
between two sizes), that last one +-:data:`MIN_HALF_WIDTH` as two sizes resolve no finer, and is never
narrower than :data:`MIN_HALF_WIDTH` either side: sizes a factor 2 apart cannot resolve an
exponent more finely. Each size is put in the regime of the term that
is most of its fitted value, "lead" when the leading term is. A fit judges theory only where
the leading term dominates.

It is one module because it is one algorithm: the model, its exact
non-negative solve over a grid of exponents, and the interval built from refits of that same solve share
their private helpers and constants; split, each part would reach into the others' internals.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

P_MAX = 4.0
"""The largest leading exponent considered (O(T^4) is beyond any attention kernel's cost)."""
P_STEP = 0.05
"""Grid spacing of candidate exponents (refined continuously for the point estimate)."""
P_RESOLUTION = 1e-3
"""The point estimate of p is rounded to this before its coefficients are solved. An exponent means nothing
finer than :data:`MIN_HALF_WIDTH`, but where the leading term fits almost exactly (bytes, not times) the
residual is flat in p to rounding error, so unrounded p would be chosen by the floating-point noise of the
machine's BLAS kernel, and the lower-order coefficients, which trade off against p, with it."""
MIN_GAP = 0.1
"""The leading exponent stays at least this far above the highest lower-order term."""
BOOTSTRAP = 200
"""Bootstrap replicates (fixed seed: the same files always give the same interval)."""
LEVEL = 0.95
MIN_HALF_WIDTH = 0.1
"""The narrowest half-width reported: exponents from sizes a factor 2 apart are no finer than this."""
LEAD_SHARE = 0.5
"""A size is in the leading regime when the leading term is at least this share of its fitted value."""
MIN_LEAD_POINTS = 2
"""A fit is judged against theory only when the leading term dominates at this many sizes (a slope needs two)."""
SEED = 20261125
MAX_LEFT_OUT = 16
"""At most this many leave-one-size-out refits per fit (:func:`left_out`): report time stays linear in the sizes."""


@dataclass(frozen=True)
class CostFit:
    """One sweep's fitted cost model, its leading exponent with an interval, and each size's regime."""

    exponent: float
    """The leading exponent p (when the leading term is absent: the highest lower-order term present)."""
    low: float
    high: float
    """The interval for p (bootstrap over samples joined with leave-one-size-out, at least ±MIN_HALF_WIDTH)."""
    lower_terms: tuple[int, ...]
    """Exponents of the lower-order terms in the model (c_0 is the constant)."""
    coefs: tuple[float, ...]
    """c_j for each lower-order term, then A, in the units of y and x."""
    xs: tuple[float, ...]
    ys: tuple[float, ...]
    regimes: tuple[str, ...]
    """Per size: "lead", or the dominating lower-order term ("fixed" for c_0, "x", "x^2", ...)."""
    r2: float
    """R² of the model on log y (comparable with a log-log fit's)."""

    @property
    def n(self) -> int:
        return len(self.xs)

    @property
    def lead_points(self) -> int:
        return sum(r == "lead" for r in self.regimes)

    @property
    def reached(self) -> bool:
        """The leading term is most of the fitted value at enough sizes to judge its exponent."""
        return self.lead_points >= MIN_LEAD_POINTS

    def predict(self, x: Sequence[float] | np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=float)
        *lower, lead = self.coefs
        y = sum(c * x ** k for c, k in zip(lower, self.lower_terms)) + lead * x ** self.exponent
        total: np.ndarray = np.asarray(y, dtype=float) + np.zeros_like(x)
        return total

    def contains(self, value: float) -> bool:
        return self.low <= value <= self.high

    @property
    def at_bound(self) -> float | None:
        """The bound of the exponents searched that the leading exponent sits at (:data:`P_MAX`, or the lowest
        allowed above the lower-order terms); None when it lies inside. At a bound the data asked for an exponent
        the model could not give: the true one is beyond it, and the value shown is the bound, not a measurement."""
        start = (max(self.lower_terms) + MIN_GAP) if self.lower_terms else 0.0
        if self.exponent >= P_MAX - P_STEP / 2:
            return P_MAX
        if self.coefs and self.coefs[-1] > 0 and self.exponent <= start + P_STEP / 2:
            return start
        return None

    def describe(self) -> str:
        """``p = 2.03 [1.95, 2.11], dominates at 3 of 4 sizes`` or ``..., leading term not reached``."""
        where = (f"dominates at {self.lead_points} of {self.n} sizes" if self.lead_points
                 else "leading term not reached")
        return f"{self.exponent:.2f} [{self.low:.2f}, {self.high:.2f}], {where}"


def lower_terms(theory: float | None, n: int) -> tuple[int, ...]:
    """The integer powers below ``theory`` (the terms an algorithm of that order also has), as many as
    ``n`` sizes can carry with a leading coefficient and exponent beside them."""
    top = 1 if theory is None else max(1, math.ceil(theory - 1e-9))
    return tuple(range(top))[: max(0, n - 2)]


def _grid(lower: tuple[int, ...]) -> np.ndarray:
    start = (max(lower) + MIN_GAP) if lower else 0.0
    return np.round(np.arange(start, P_MAX + P_STEP / 2, P_STEP), 10)


def _solve(x: np.ndarray, y: np.ndarray, lower: tuple[int, ...], ps: np.ndarray
           ) -> tuple[np.ndarray, np.ndarray]:
    """For each row of ``y`` (B, n) and each exponent in ``ps`` (m,): the relative residual sum of squares
    (B, m) and the non-negative coefficients (B, m, k+1) of the best fit.

    Exact NNLS by active sets: the optimum is the unconstrained fit on some subset of the columns whose
    coefficients are all non-negative, and among those it has the least residual."""
    k = len(lower) + 1
    cols = np.stack([np.broadcast_to(x ** j, (len(ps), len(x))) for j in lower]
                    + [x[None, :] ** ps[:, None]], axis=-1)  # (m, n, k)
    inv = 1.0 / y  # (B, n): rows scaled to relative residuals, the target 1 at every size
    m, n = cols.shape[:2]
    outer = np.einsum("mnk,mnl->nmkl", cols, cols).reshape(n, -1)
    gram = (inv ** 2 @ outer).reshape(len(y), m, k, k)
    rhs = (inv @ cols.transpose(1, 0, 2).reshape(n, -1)).reshape(len(y), m, k)
    # Jacobi scaling (each column to unit weighted norm): the powers of x span decades, and an unscaled Gram
    # matrix would let the BLAS kernel's last digits decide the small coefficients
    norm = np.sqrt(np.maximum(np.diagonal(gram, axis1=-2, axis2=-1), np.finfo(float).tiny))  # (B, m, k)
    gram = gram / (norm[..., :, None] * norm[..., None, :])
    rhs = rhs / norm
    best = np.full(gram.shape[:2], float(n))
    coefs = np.zeros(gram.shape[:2] + (k,))
    for size in range(1, k + 1):
        for subset in itertools.combinations(range(k), size):
            idx = list(subset)
            scaled = _small_solve(gram[..., idx, :][..., :, idx], rhs[..., idx])
            rss = n - (rhs[..., idx] * scaled).sum(axis=-1)
            c = scaled / norm[..., idx]
            ok = np.isfinite(c).all(axis=-1) & (c >= 0).all(axis=-1) & (rss < best)
            best = np.where(ok, rss, best)
            coefs[..., idx] = np.where(ok[..., None], c, coefs[..., idx])
            rest = [j for j in range(k) if j not in idx]
            coefs[..., rest] = np.where(ok[..., None], 0.0, coefs[..., rest])
    return np.maximum(best, 0.0), coefs


def _small_solve(g: np.ndarray, r: np.ndarray) -> np.ndarray:
    """Batched solutions of g c = r for 1x1 .. 3x3 systems in closed form (Cramer's rule), larger by LAPACK;
    a singular system gives a non-finite c, which the caller's feasibility test rejects."""
    size = g.shape[-1]
    with np.errstate(divide="ignore", invalid="ignore"):
        if size == 1:
            return np.asarray(r / g[..., 0])
        if size == 2:
            a, b, d = g[..., 0, 0], g[..., 0, 1], g[..., 1, 1]
            det = a * d - b * b
            return np.stack([(d * r[..., 0] - b * r[..., 1]) / det, (a * r[..., 1] - b * r[..., 0]) / det], axis=-1)
        if size == 3:
            cof = np.stack([np.cross(g[..., 1, :], g[..., 2, :]), np.cross(g[..., 2, :], g[..., 0, :]),
                            np.cross(g[..., 0, :], g[..., 1, :])], axis=-2)  # rows of the adjugate (g symmetric)
            det = (g[..., 0, :] * cof[..., 0, :]).sum(axis=-1)
            return np.asarray(np.einsum("...ij,...j->...i", cof, r) / det[..., None])
        ridge = np.eye(size) * 1e-12 * np.trace(g, axis1=-2, axis2=-1)[..., None, None]
        return np.asarray(np.linalg.solve(g + ridge, r[..., None])[..., 0])


def _estimate(x: np.ndarray, ys: np.ndarray, lower: tuple[int, ...]) -> np.ndarray:
    """The grid estimate of p for each row of ``ys``, with a parabola through the best grid point."""
    ps = _grid(lower)
    rss, coefs = _solve(x, ys, lower, ps)
    rows = np.arange(len(ys))
    i = np.argmin(rss, axis=1)
    inner = np.clip(i, 1, len(ps) - 2)
    r0, r1, r2 = (rss[rows, inner + o] for o in (-1, 0, 1))
    curve = r0 - 2 * r1 + r2
    shift = np.where((curve > 0) & (i == inner), 0.5 * (r0 - r2) / np.where(curve > 0, curve, 1.0), 0.0)
    p = ps[i] + np.clip(shift, -0.5, 0.5) * P_STEP
    best = coefs[rows, i]  # (B, k+1)
    return np.array([_leading(float(q), c, lower) for q, c in zip(p, best)])


def _point(x: np.ndarray, y: np.ndarray, lower: tuple[int, ...]) -> tuple[float, np.ndarray]:
    """The best p (grid, then a bounded scalar search around it) and its coefficients."""
    from scipy.optimize import minimize_scalar

    ps = _grid(lower)
    rss, _ = _solve(x, y[None, :], lower, ps)
    i = int(np.argmin(rss[0]))
    p = float(ps[i])
    lo, hi = float(ps[max(i - 1, 0)]), float(ps[min(i + 1, len(ps) - 1)])
    if hi > lo:
        res = minimize_scalar(lambda q: float(_solve(x, y[None, :], lower, np.array([q]))[0][0, 0]),
                              bounds=(lo, hi), method="bounded", options={"xatol": 1e-6})
        q = min(max(round(float(res.x) / P_RESOLUTION) * P_RESOLUTION, lo), hi)
        if float(_solve(x, y[None, :], lower, np.array([q]))[0][0, 0]) < float(rss[0, i]):
            p = q
    _, c = _solve(x, y[None, :], lower, np.array([p]))
    return p, c[0, 0]


def _regimes(x: np.ndarray, coefs: np.ndarray, lower: tuple[int, ...], p: float) -> tuple[str, ...]:
    terms = np.stack([coefs[j] * x ** k for j, k in enumerate(lower)] + [coefs[-1] * x ** p])
    total = terms.sum(axis=0)
    names = ["fixed" if k == 0 else ("x" if k == 1 else f"x^{k}") for k in lower] + ["lead"]
    out = []
    for i in range(len(x)):
        if total[i] > 0 and terms[-1, i] >= LEAD_SHARE * total[i]:
            out.append("lead")
        else:
            out.append(names[int(np.argmax(terms[:, i]))])
    return tuple(out)


def _leading(p: float, coefs: np.ndarray, lower: tuple[int, ...]) -> float:
    """p, or when the fit has no leading term the exponent of the highest lower-order term it kept."""
    if coefs[-1] > 0:
        return p
    kept = [k for k, c in zip(lower, coefs[:-1]) if c > 0]
    return float(max(kept)) if kept else p


def _prepare(xs: Sequence[float], ys: Sequence[float], theory: float | None, lower: tuple[int, ...] | None
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple[int, ...]]:
    """(order, sizes sorted, values in that order, the lower-order terms the sizes can carry)."""
    order = np.argsort(np.asarray(xs, dtype=float))
    x_raw = np.asarray(xs, dtype=float)[order]
    y = np.asarray(ys, dtype=float)[order]
    if len(x_raw) < 2 or len(set(x_raw.tolist())) != len(x_raw):
        raise ValueError(f"a cost model needs at least two distinct sizes, one value each; got {list(xs)}")
    if (x_raw <= 0).any() or (y <= 0).any() or not np.isfinite(y).all():
        raise ValueError("a cost model needs positive sizes and values")
    terms = lower_terms(theory, len(x_raw)) if lower is None else lower[: max(0, len(x_raw) - 2)]
    return order, x_raw, y, terms


def _scatter(y: np.ndarray, fitted: np.ndarray, coefs: np.ndarray) -> tuple[np.ndarray, int]:
    """Log residuals of a fit and its degrees of freedom (sizes less the terms it kept, less p when it has
    a leading term)."""
    kept = int((coefs > 0).sum()) + int(coefs[-1] > 0)
    return np.log(y / fitted), len(y) - kept


def run_scatter(series: Iterable[tuple[Sequence[float], Sequence[float], float | None]]) -> float:
    """How far one run's cells scatter around their own cost models, as a relative standard deviation.

    Each cell's samples show the noise within it, but not the drift between cells (the machine's load
    changes between one cell and the next), which is what bends a sweep. Each (sizes, values, theory)
    series is fitted, and the scatter is a robust pooled estimate over the fits with degrees of freedom
    left: 1.4826 x the median of |log residual| x sqrt(n / dof). One wild cell does not move it."""
    scaled: list[float] = []
    for xs, ys, theory in series:
        try:
            _, x_raw, y, terms = _prepare(xs, ys, theory, None)
        except ValueError:
            continue
        x = x_raw / x_raw[-1]
        p, coefs = _point(x, y, terms)
        residuals, dof = _scatter(y, _model(x, coefs, terms, p), coefs)
        if dof > 0:
            scaled += list(np.abs(residuals) * math.sqrt(len(y) / dof))
    return float(1.4826 * np.median(scaled)) if scaled else 0.0


def _log_spread(samples: Sequence[float]) -> float:
    """A robust standard deviation of one cell's samples in log space (1.4826 x their median absolute deviation)."""
    logs = np.log(np.asarray(samples, dtype=float))
    return float(1.4826 * np.median(np.abs(logs - np.median(logs))))


def falls(values: Sequence[float] | np.ndarray) -> float:
    """The largest fall along a series that should never fall: max log(y_i / y_j) over i < j (0 if none)."""
    logs = np.log(np.asarray(values, dtype=float))
    if len(logs) < 2:
        return 0.0
    later_min = np.minimum.accumulate(logs[::-1])[::-1]  # the smallest value from each position on: O(n)
    return float(max(0.0, float(np.max(logs[:-1] - later_min[1:]))))


def left_out(n: int) -> list[int]:
    """The sizes the leave-one-size-out estimates leave out: every one of up to :data:`MAX_LEFT_OUT`, else that
    many spread evenly from the smallest to the largest. Each refit costs O(n), so leaving out every size of a
    long sweep would make a report quadratic in its sizes; in a long sweep one size moves the fit little, and
    the ends, which move it most, are always left out in turn."""
    if n <= MAX_LEFT_OUT:
        return list(range(n))
    return sorted({int(round(i)) for i in np.linspace(0, n - 1, MAX_LEFT_OUT)})


def fit_cost(xs: Sequence[float], ys: Sequence[float], samples: Sequence[Sequence[float]] | None = None, *,
             theory: float | None = None, lower: tuple[int, ...] | None = None,
             replicates: int = BOOTSTRAP, drift: float | None = None, monotone: bool = False) -> CostFit:
    """Fit ``ys`` against ``xs`` (one value per distinct size, e.g. medians) with the cost model.

    ``samples`` (one sequence per size, the raw timings behind each value) feed the bootstrap. ``drift``
    (a relative standard deviation, :func:`run_scatter`) is the scatter between cells of the run, put on
    each bootstrapped value; without it, a fit with degrees of freedom left resamples its own residuals.
    ``monotone``: the quantity never falls as the size grows (time, when more size is more work); where
    the values fall anyway, the fall is drift between these cells, and the drift is at least that.
    ``lower`` defaults to the integer powers below ``theory`` (:func:`lower_terms`)."""
    order, x_raw, y, terms = _prepare(xs, ys, theory, lower)
    if monotone and drift is not None:
        drift = max(drift, falls(y))
    scale = float(x_raw[-1])
    x = x_raw / scale  # well-conditioned columns; coefficients are converted back below
    p, coefs = _point(x, y, terms)
    fitted = _model(x, coefs, terms, p)
    kept = [list(map(float, s)) for s in samples] if samples is not None else []
    if kept and len(kept) == len(x) and all(len(s) >= 2 for s in kept):
        kept = [kept[int(i)] for i in order]
    else:
        kept = []
    regimes = _regimes(x, coefs, terms, p)
    estimates = [p, *_bootstrap(x, y, terms, coefs, fitted, kept, drift, replicates), *_left_out(x, y, terms),
                 *_lead_slopes(x, y, regimes)]
    lead = _leading(p, coefs, terms)
    low = min(min(estimates), lead - MIN_HALF_WIDTH)
    high = max(max(estimates), lead + MIN_HALF_WIDTH)
    real = tuple(float(c) / scale ** k for c, k in zip(coefs, (*terms, p)))
    return CostFit(exponent=float(lead), low=float(low), high=float(high), lower_terms=terms, coefs=real,
                   xs=tuple(map(float, x_raw)), ys=tuple(map(float, y)), regimes=regimes,
                   r2=_r2(np.log(y), np.log(np.maximum(fitted, 1e-300))))


def _bootstrap(x: np.ndarray, y: np.ndarray, terms: tuple[int, ...], coefs: np.ndarray, fitted: np.ndarray,
               samples: list[list[float]], drift: float | None, replicates: int) -> list[float]:
    """The bootstrap interval's two ends (none when there is nothing to resample): each size's raw ``samples``
    (sorted as ``x``; empty when some size lacks them) resampled, with the ``drift`` between cells on top, or
    else the fit's own residuals when it has degrees of freedom left."""
    rng = np.random.default_rng(SEED)
    boot = np.tile(y, (replicates, 1))
    sampled = bool(samples)
    if sampled:
        medians = np.stack([np.median(rng.choice(np.asarray(s), size=(replicates, len(s))), axis=1) for s in samples],
                           axis=1)  # (B, n): each size's median of its resampled samples
        boot = medians * (y / np.asarray([np.median(s) for s in samples]))  # the recorded value may be another statistic
    residuals, dof = _scatter(y, fitted, coefs)
    if drift is not None and (drift > 0 or sampled):
        # the drift between cells, which no cell's median shows: at least the run's scatter, and for a cell
        # whose own samples spread (the load changed while it ran) that spread, since the load can change as
        # much from one cell to the next
        spread = np.array([_log_spread(s) for s in samples]) if sampled else np.zeros(len(x))
        boot = boot * np.exp(rng.normal(0.0, 1.0, size=boot.shape) * np.maximum(drift, spread))
    elif dof > 0:  # what the model leaves unexplained (a shape it lacks, drift), resampled onto it
        boot = boot * np.exp(rng.choice(residuals * math.sqrt(len(x) / dof), size=boot.shape))
    elif not sampled:
        return []
    if not replicates:
        return []
    estimates = _estimate(x, boot, terms)
    tail = (1 - LEVEL) / 2
    return [float(np.quantile(estimates, tail)), float(np.quantile(estimates, 1 - tail))]


def _left_out(x: np.ndarray, y: np.ndarray, terms: tuple[int, ...]) -> list[float]:
    """The leave-one-size-out estimates of p (:func:`left_out`), from four sizes up: every remaining subset
    keeps a constant term beside the leading one."""
    if len(x) < 4:
        return []
    estimates = []
    for i in left_out(len(x)):
        keep = np.arange(len(x)) != i
        sub = terms[: max(0, int(keep.sum()) - 2)]
        estimates.append(float(_estimate(x[keep], y[keep][None, :], sub)[0]))
    return estimates


def _lead_slopes(x: np.ndarray, y: np.ndarray, regimes: tuple[str, ...]) -> list[float]:
    """The plain log-log slope where the leading term dominates (lower-order costs that overlap the leading one,
    a wait hidden by work, rather than add), and the growth between the two largest such sizes
    +-:data:`MIN_HALF_WIDTH` (two sizes resolve an exponent no finer); none below two such sizes."""
    leading = [i for i, r in enumerate(regimes) if r == "lead"]
    if len(leading) < 2:
        return []
    lx, ly = np.log(x[leading]), np.log(y[leading])
    top = float((ly[-1] - ly[-2]) / (lx[-1] - lx[-2]))
    return [float(np.polyfit(lx, ly, 1)[0]), top - MIN_HALF_WIDTH, top + MIN_HALF_WIDTH]


def _model(x: np.ndarray, coefs: np.ndarray, lower: tuple[int, ...], p: float) -> np.ndarray:
    return np.asarray(sum(c * x ** k for c, k in zip(coefs[:-1], lower)) + coefs[-1] * x ** p + 0 * x)


def _r2(ly: np.ndarray, lf: np.ndarray) -> float:
    total = float(((ly - ly.mean()) ** 2).sum())
    return 1.0 - float(((ly - lf) ** 2).sum()) / total if total > 0 else 1.0
