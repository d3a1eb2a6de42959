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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

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


AXIS_FIELDS = {"T": ("tq", "tk"), "d": ("d",), "heads": ("heads", "kv_heads"), "Tk": ("tk",)}
"""Fit axes and the case fields that move together along them. "T" takes square cases (Tq = Tk); "Tk" the
decode steps (a few queries, Tq < Tk, against a growing cache: theory 1)."""


def _size(case: Mapping[str, object], key: str) -> int:
    """An integer field of a stored case (a size: batch, heads, tq, tk, d)."""
    value = case[key]
    if not isinstance(value, (int, float)):
        raise TypeError(f"case field {key}={value!r} is not a number")
    return int(value)


def _on_axis(case: Mapping[str, object], axis: str) -> bool:
    if axis == "T":
        return _size(case, "tq") == _size(case, "tk")
    if axis == "Tk":
        return _size(case, "tq") < _size(case, "tk")
    return True


GroupKey = tuple[str, str, tuple[tuple[str, str], ...]]
"""(implementation, mode, the case's fields off the swept axis): the cells one fit runs through."""


def _group_key(cell: BenchCell, axis_fields: tuple[str, ...]) -> GroupKey:
    def value(k: str, v: object) -> str:  # packed lengths grow with T: along T only their count is fixed
        return f"{len(v)} sequences" if k == "varlen" and "tq" in axis_fields and isinstance(v, (list, tuple)) else str(v)

    fixed = tuple(sorted((k, value(k, v)) for k, v in cell.case.items() if k not in axis_fields))
    return (cell.implementation, cell.mode, fixed)


def _fixed_label(case: Mapping[str, object], axis_fields: tuple[str, ...]) -> str:
    parts = {"batch": "B", "heads": "H", "tq": "T", "d": "d"}
    label = [f"{p}{case[k]}" for k, p in parts.items() if k not in axis_fields]
    label.append(str(case["dtype"]))
    if case.get("causal"):
        label.append("causal")
    label += _structure_label(case)
    return "-".join(label)


def _structure_label(case: Mapping[str, object]) -> list[str]:
    """``window=L,R``, ``bottom_right``, ``varlen``: what a case's structure adds to a label (nothing without)."""
    window = case.get("window")
    parts = ["window=" + ",".join(map(str, window))] if isinstance(window, (list, tuple)) else []
    if case.get("causal_align") not in (None, "top_left"):
        parts.append(str(case["causal_align"]))
    return parts + (["varlen"] if case.get("varlen") is not None else [])


def _work(case: Mapping[str, object]) -> float:
    """g of the O(g) fit: B * H * Tq * Tk * d, or with a structure that limits the pairs (a window,
    packed sequences) B * H * (attended pairs) * d (:func:`harness.flops.work_g`)."""
    if case.get("window") is None and case.get("varlen") is None and case.get("cache_seqlens") is None:
        return float(_size(case, "batch") * _size(case, "heads") * _size(case, "tq") * _size(case, "tk") * _size(case, "d"))
    from harness.cases import AttentionCase
    from harness.flops import work_g

    return float(work_g(AttentionCase.from_dict(dict(case))))


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
    """Every fit the ok bench cells allow: time vs T, d, heads; memory vs T; time vs g (O(g) coef).

    A fit needs at least three distinct sizes along its axis with everything else fixed.
    """
    ok = [c for c in cells if isinstance(c, BenchCell) and c.status == Status.OK and c.median
          and c.case.get("kind", "kernel") == "kernel"]  # module cells (whole layers) are not fitted
    fits: list[dict[str, object]] = []
    for axis, fields in AXIS_FIELDS.items():
        groups: dict[GroupKey, list[BenchCell]] = {}
        for cell in ok:
            if _on_axis(cell.case, axis):
                groups.setdefault(_group_key(cell, fields), []).append(cell)
        for (impl, mode, _), members in groups.items():
            if len({c.case[fields[0]] for c in members}) < MIN_POINTS:
                continue
            xs = [c.case[fields[0]] for c in members]
            base = {"implementation": impl, "mode": mode, "axis": axis,
                    "fixed": _fixed_label(members[0].case, fields)}
            fit = fit_exponent(xs, [_median(c) for c in members])
            fits.append({**base, "quantity": "time", **fit.to_dict()})
            if axis != "T":
                continue
            mem = [(x, footprint) for x, c in zip(xs, members) if (footprint := call_footprint(c))]
            if len({x for x, _ in mem}) >= MIN_POINTS:
                mfit = fit_exponent([x for x, _ in mem], [y for _, y in mem])
                fits.append({**base, "quantity": "memory", **mfit.to_dict()})
    by_impl: dict[tuple[str, ...], list[BenchCell]] = {}
    for cell in ok:
        case = cell.case
        structure = "-".join(_structure_label(case))
        by_impl.setdefault((cell.implementation, cell.mode, case["dtype"], case["causal"], structure), []).append(cell)
    for (impl, mode, dtype, causal, structure), members in by_impl.items():
        if len(members) < 2:
            continue
        gs = [_work(c.case) for c in members]
        cfit = fit_complexity(gs, [_median(c) for c in members])
        fits.append({"implementation": impl, "mode": mode, "axis": "g", "quantity": "time",
                     "fixed": dtype + ("-causal" if causal else "") + (f"-{structure}" if structure else ""),
                     **cfit.to_dict()})
    return fits
