"""Scaling fits: how time (or memory) grows with T, d and heads, and google-benchmark's O(g) fit.

``fit_exponent`` fits ``log y = slope * log x + intercept`` by least squares. At small sizes
fixed costs (Python dispatch, thread wake-up, allocation) dominate and flatten the curve,
which would drag the slope down; those leading points are left out by a stated rule
(:data:`OVERHEAD_RULE`) and reported in ``excluded``, never silently.

``fit_complexity`` is google-benchmark's complexity fit for a known term: time = coef * g
with g = B * H * Tq * Tk * d, coef by least squares, and the RMS of the residuals relative
to the mean time (google-benchmark prints it as a percentage).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from harness.reference.flops import work_g
from harness.results.cells import CellCase
from harness.results.schema import BenchCell, Cell, Status

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


@dataclass
class ComplexityFit:
    """google-benchmark's fit for a given term: y ~ coef * g."""

    coef: float
    rms: float
    """Root-mean-square of the residuals, in y's units."""
    rms_rel: float
    """rms divided by the mean of y (google-benchmark's "RMS" percentage, as a fraction)."""
    n: int

    def to_dict(self) -> dict[str, float | int]:
        return {"coef": self.coef, "rms": self.rms, "rms_rel": self.rms_rel, "n": self.n}


def fit_complexity(gs: Sequence[float], ys: Sequence[float]) -> ComplexityFit:
    """Least-squares coef of y = coef * g, and the relative RMS of what it leaves unexplained."""
    if len(gs) != len(ys) or not gs:
        raise ValueError("fit_complexity needs equally many g and y values, at least one")
    coef = sum(g * y for g, y in zip(gs, ys)) / sum(g * g for g in gs)
    rms = math.sqrt(sum((y - coef * g) ** 2 for g, y in zip(gs, ys)) / len(gs))
    mean = sum(ys) / len(ys)
    return ComplexityFit(coef, rms, rms / mean if mean else math.inf, len(gs))


@dataclass(frozen=True)
class Axis:
    """One axis a sweep runs along: the case fields that move together on it (the first is the size plotted and
    fitted), which cases lie on it, and how time grows along it in theory. :data:`AXES` is the one list of them:
    bench's log-log fits (:func:`cell_fits`) and the cost-model sweeps bench and the report fit
    (:mod:`harness.analysis.slices`, :mod:`harness.analysis.sweepfits`) read it."""

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
FITTED_AXES = ("T", "d", "heads", "Tk")
"""The axes bench's stored fits run along (a window's width is the report's alone: its size is derived)."""


def _size(case: CellCase, key: str) -> int:
    """An integer field of a stored case (a size: batch, heads, tq, tk, d), named as an axis names it."""
    value = getattr(case, key)
    if not isinstance(value, (int, float)):
        raise TypeError(f"case field {key}={value!r} is not a number")
    return int(value)


def _on_axis(case: CellCase, axis: Axis) -> bool:
    heads = _size(case, "heads")
    return axis.holds(_size(case, "tq"), _size(case, "tk"), heads, heads if case.kv_heads is None else case.kv_heads)


GroupKey = tuple[str, str, tuple[tuple[str, str], ...]]
"""(implementation, mode, the case's fields off the swept axis): the cells one fit runs through."""


def _group_key(cell: BenchCell, axis_fields: tuple[str, ...]) -> GroupKey:
    def value(k: str, v: object) -> str:  # packed lengths grow with T: along T only their count is fixed
        return f"{len(v)} sequences" if k == "varlen" and "tq" in axis_fields and isinstance(v, (list, tuple)) else str(v)

    fixed = tuple(sorted((k, value(k, v)) for k, v in cell.case.items() if k not in axis_fields))
    return (cell.implementation, cell.mode, fixed)


def _fixed_label(case: CellCase, axis_fields: tuple[str, ...]) -> str:
    parts = {"batch": "B", "heads": "H", "tq": "T", "d": "d"}
    label = [f"{p}{getattr(case, k)}" for k, p in parts.items() if k not in axis_fields]
    label.append(str(case.dtype))
    if case.causal:
        label.append("causal")
    label += _structure_label(case)
    return "-".join(label)


def _structure_label(case: CellCase) -> list[str]:
    """``window=L,R``, ``bottom_right``, ``varlen``: what a case's structure adds to a label (nothing without)."""
    parts = [] if case.window is None else ["window=" + ",".join(map(str, case.window))]
    if case.causal_align not in (None, "top_left"):
        parts.append(str(case.causal_align))
    return parts + (["varlen"] if case.varlen is not None else [])


def _work(cell: BenchCell) -> float:
    """g of the O(g) fit: B * H * Tq * Tk * d, or with a structure that limits the pairs (a window, packed
    sequences, cache lengths) B * H * (attended pairs) * d (:func:`harness.reference.flops.work_g`), of the cell's typed case."""
    case = cell.attention_case
    if case is None:
        raise ValueError(f"{cell.implementation} {cell.case_id}: its stored case is not an attention case")
    return float(work_g(case))


def call_footprint(cell: BenchCell) -> int | None:
    """The memory a call needs: what it returns plus the extra at its peak (None when not measured).

    Memory exponents are fitted on this, not on the extra alone: a tiled kernel's extra is a few
    fixed-size tiles, O(1), and only with its O(T) output does it show FlashAttention's O(T).
    """
    memory = cell.memory
    if memory is None or memory.peak_extra_bytes is None:
        return None
    return int(memory.peak_extra_bytes) + int(memory.output_bytes or 0) or None


def _median(cell: BenchCell) -> float:
    assert cell.median is not None  # only cells with statistics are fitted
    return float(cell.median)


def cell_fits(cells: Iterable[Cell]) -> list[dict[str, object]]:
    """Every fit the ok bench cells allow: time along each of :data:`FITTED_AXES`, memory along T; time vs g
    (the O(g) coefficient). A fit needs at least three distinct sizes along its axis with everything else fixed."""
    ok = [c for c in cells if isinstance(c, BenchCell) and c.status == Status.OK and c.median
          and (c.case.kind or "kernel") == "kernel"]  # module cells (whole layers) are not fitted
    fits = [fit for name in FITTED_AXES for fit in _axis_fits(ok, AXES[name])]
    return fits + _work_fits(ok)


def _axis_fits(cells: list[BenchCell], axis: Axis) -> list[dict[str, object]]:
    """Time along ``axis`` for every group of cells that differ only along it; along T also the call's memory."""
    groups: dict[GroupKey, list[BenchCell]] = {}
    for cell in cells:
        if _on_axis(cell.case, axis):
            groups.setdefault(_group_key(cell, axis.fields), []).append(cell)
    fits: list[dict[str, object]] = []
    for (impl, mode, _), members in groups.items():
        xs = [_size(c.case, axis.size) for c in members]
        if len(set(xs)) < MIN_POINTS:
            continue
        base = {"implementation": impl, "mode": mode, "axis": axis.name, "fixed": _fixed_label(members[0].case, axis.fields)}
        fits.append({**base, "quantity": "time", **fit_exponent(xs, [_median(c) for c in members]).to_dict()})
        mem = [(x, footprint) for x, c in zip(xs, members) if (footprint := call_footprint(c))]
        if axis.name == "T" and len({x for x, _ in mem}) >= MIN_POINTS:
            fits.append({**base, "quantity": "memory", **fit_exponent([x for x, _ in mem], [y for _, y in mem]).to_dict()})
    return fits


def _work_fits(cells: list[BenchCell]) -> list[dict[str, object]]:
    """google-benchmark's O(g) coefficient per implementation, mode, dtype, causality and structure."""
    groups: dict[tuple[str, str, str, bool, str], list[BenchCell]] = {}
    for cell in cells:
        case = cell.case
        key = (cell.implementation, cell.mode, str(case.dtype), bool(case.causal), "-".join(_structure_label(case)))
        groups.setdefault(key, []).append(cell)
    fits: list[dict[str, object]] = []
    for (impl, mode, dtype, causal, structure), members in groups.items():
        if len(members) < 2:
            continue
        cfit = fit_complexity([_work(c) for c in members], [_median(c) for c in members])
        fits.append({"implementation": impl, "mode": mode, "axis": "g", "quantity": "time",
                     "fixed": dtype + ("-causal" if causal else "") + (f"-{structure}" if structure else ""),
                     **cfit.to_dict()})
    return fits
