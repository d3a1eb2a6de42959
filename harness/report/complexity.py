"""Sweeps and scaling: which cells form a sweep along T, d or heads, and their fitted cost models.

A sweep is the set of cells that differ only along one axis (all other case fields and the
mode fixed). Of all candidate slices the one with the most points is the report's sweep,
preferring the forward pass without causal masking, so that a plot shows one clean line per
implementation. Each implementation's points are fitted with the cost model of
:mod:`harness.analysis.costmodel`: the lower-order terms the algorithm has (a constant, and
for an O(T^2) cost a term in T) plus a leading power term, whose exponent comes with an
interval from the raw samples and with the regime each size is in.

Theory: time grows as T^2, d and heads; peak memory as T^2 for an implementation that
materialises the (Tq, Tk) score matrix and as T for a tiled (FlashAttention-style) one. A fit
is flagged only when theory lies outside its exponent's interval and the leading term is most
of the cost at two sizes or more; for a tiled kernel's memory only when the interval lies above
(O(T) is a bound; fixed-size tiles can dominate at small T).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from harness.analysis.costmodel import CostFit, fit_cost, run_scatter
from harness.analysis.scaling import AXES as FIT_AXES  # the axes, their case fields and theory: defined once
from harness.analysis.scaling import MIN_POINTS, Axis  # MIN_POINTS: fewer fitted sizes are shown, not judged

AXES = {name: "window_width" if name == "window" else axis.size for name, axis in FIT_AXES.items()}
"""Fit axes and the column each is plotted and fitted against; ``window_width`` (left + right) is derived from
the ``window`` column."""
FIXED = ("batch", "heads", "kv_heads", "tq", "tk", "d", "dtype", "device", "causal", "mask", "inputs",
         "layout", "bias", "kind", "mode", "window", "causal_align", "varlen", "cache_seqlens", "page_size",
         "node_kind")
"""A sweep holds these fixed, but for its axis's own fields: one kind of machine too (``node_kind``: a cluster
run's cells are never fitted or divided across machines)."""
TIME_THEORY = {name: axis.time_theory for name, axis in FIT_AXES.items()}
"""Tk: decode steps (Tq < Tk, a KV cache of Tk keys): the work and the bytes read grow as Tk."""
WINDOW_TIME_THEORY = 1.0
"""Under a sliding window of fixed width the attended pairs, and the time of a kernel that skips the
blocks outside it, grow as T: cells with a window are fitted in a sweep of their own against this."""
MEMORY = "peak_bytes"
"""The memory a call needs: its output plus bench's ``peak_extra_bytes`` (the extra at the peak,
above inputs and output). With the output counted, a tiled kernel is O(T) as FlashAttention
states it, and a materialising one O(T^2); the extra alone of a tiled kernel is a few tiles, O(1)."""

EXCESS = 0.5
"""A time exponent this far above theory, over the whole sweep, is an excess of the cost's order (an O(T^3) where
O(T^2) is due gives 1); a cache effect or a block size moves the per-FLOP rate by a bounded factor between two
sizes, which over a sweep of 8x shows as a fraction of this, concentrated in one step."""
MAX_FALL = 1.10
"""A time sweep whose time falls by more than this factor from one size to a larger one is not judged."""
MEMORY_EXPONENT = {"quadratic": 2.0, "linear": 1.0}
"""Theory for peak memory in T, from the ``memory=`` each implementation declares at registration
(recorded by bench in the result file's "implementations")."""


@dataclass
class Sweep:
    axis: str
    """"T", "d" or "heads"."""
    column: str
    fixed: dict[str, object]
    frame: pd.DataFrame
    windowed: bool = False
    """Cells with a sliding window (time theory :data:`WINDOW_TIME_THEORY` in T)."""
    packed: bool = False
    """Cells of packed sequences (varlen; lengths proportional to T, so the work still grows as T^2)."""

    @property
    def label(self) -> str:
        f = self.fixed
        names = {"tq": "T" if "tk" in f and f.get("tk") == f.get("tq") else "Tq", "tk": "Tk", "d": "d",
                 "heads": "H", "batch": "B"}
        if f.get("tk") == f.get("tq") or "tk" not in f:
            names.pop("tk")
        parts = [f"{short}={f[col]}" for col, short in names.items() if col in f]
        extras = [str(f.get("dtype", "")), str(f.get("mode", ""))]
        if f.get("causal") in (True, "True"):
            extras.append("causal")
        if _set(f.get("window")):
            extras.append(f"window={f['window']}")
        if f.get("causal_align") not in (None, "top_left"):
            extras.append(str(f["causal_align"]))
        if _set(f.get("varlen")):
            extras.append(f"varlen={f['varlen']}")
        if f.get("mask") not in (None, "none"):
            extras.append(f"mask={f['mask']}")
        if isinstance(f.get("node_kind"), str):
            extras.append(f"on {f['node_kind']}")
        return ", ".join(parts + [e for e in extras if e])


def _set(value: Any) -> bool:
    """A structure column holds a value (pandas reads a missing one as None or NaN)."""
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def sweep(frame: pd.DataFrame, axis: str, value: str = "median", windowed: bool = False,
          packed: bool = False) -> Sweep | None:
    """The largest slice of ``frame`` that varies along ``axis`` only (None when there is none), among
    the cells with a sliding window (``windowed``) or those without, of packed sequences (``packed``) or not."""
    column = AXES[axis]
    data = _on_axis(_measured(frame, value, windowed, packed), FIT_AXES[axis], windowed)
    if data is None or data.empty:
        return None
    fixed = [c for c in FIXED if c != column and c not in FIT_AXES[axis].fields and c in data.columns]
    keys = pd.Series(["|".join(map(str, row)) for row in data[fixed].itertuples(index=False)], index=data.index)
    best = _largest_slice(data, keys, column)
    if best is None:
        return None
    group = data[keys == best].sort_values(["implementation", column])
    first = group.iloc[0]
    return Sweep(axis=axis, column=column, fixed={c: first[c] for c in fixed}, frame=group, windowed=windowed,
                 packed=packed)


def _measured(frame: pd.DataFrame, value: str, windowed: bool, packed: bool) -> pd.DataFrame | None:
    """The ok cells with a ``value``, with a sliding window or without (``windowed``), packed or not (``packed``);
    None when the frame has no structure column that the wanted cells need."""
    data = frame[(frame["status"] == "ok") & frame[value].notna()] if not frame.empty else frame
    for name, wanted in (("window", windowed), ("varlen", packed)):
        if name in data.columns:
            data = data[data[name].notna() == wanted]
        elif wanted:
            return None
    return data


def _on_axis(data: pd.DataFrame | None, axis: Axis, windowed: bool) -> pd.DataFrame | None:
    """The cells that lie on ``axis`` (:meth:`Axis.holds`) with a positive size (a log axis: a size of 0, from
    a damaged file, is no point); along a window's width, only windowed cells, their width derived."""
    if data is None or data.empty:
        return None
    if axis.name == "window":  # the window's width at fixed T: pairs, and a banded kernel's time, grow as the width
        if not windowed:
            return None
        data = data.assign(window_width=[sum(int(x) for x in str(w).split(",")) for w in data["window"]])
    if axis.name in ("T", "Tk"):
        data = data[(data["tq"] == data["tk"]) if axis.name == "T" else (data["tq"] < data["tk"])]
    if axis.name == "heads":
        data = data[data["kv_heads"] == data["heads"]]
    column = AXES[axis.name]
    return data[pd.to_numeric(data[column], errors="coerce") > 0]


def _largest_slice(data: pd.DataFrame, keys: pd.Series, column: str) -> str | None:
    """The key of the slice with the most points (sizes summed over its implementations with two or more),
    preferring the forward pass, no causal masking and no mask; None when no slice has two sizes."""
    # one pass over the cells (a sweep of n sizes along d has n slices: one groupby each would be slow)
    counts = data.groupby([keys, data["implementation"]])[column].nunique()
    points = counts[counts >= 2].groupby(level=0).sum()
    if points.empty:
        return None
    firsts = data.loc[~keys.duplicated()].set_axis(keys[~keys.duplicated()])

    def score(key: str) -> tuple[int, bool, bool, bool]:
        first = firsts.loc[key]
        return (int(points[key]), first["mode"] == "fwd", str(first["causal"]) != "True", str(first["mask"]) == "none")

    return str(max(sorted(points.index), key=score))


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
        return 0 if self.fit is None else self.fit.n

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
                return self.fit.low > self.theory
            return not self.fit.contains(self.theory)
        if self.relative is not None:
            return self.relative.low > EXCESS and sustained(self.relative.xs, self.relative.ratios, 0.0)
        if self.fit.high < self.theory - EXCESS:  # half an order less work than the algorithm's: not a dense kernel
            return True
        return self.fit.low > self.theory + EXCESS and sustained(self.fit.xs, self.fit.ys, self.theory)

    @property
    def departure(self) -> str | None:
        """For time judged and not flagged: where the per-work rate falls most from one size to the next, when
        the exponent's interval lies above theory ("per-FLOP rate falls 40% from d 64 to 128"): how a real kernel's
        cost departs from the algorithm's (caches, block sizes), not a fault."""
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
        """Judged, not flagged, and the interval holds both theory and theory + 1 (time; memory: the other of 1
        and 2): the sizes run cannot tell the orders apart, so the report says so instead of "ok"."""
        if not self.judged or self.flagged or self.fit is None or self.theory is None or self.departure:
            return False
        if self.quantity == "time" and self.relative is not None:
            return self.relative.low <= EXCESS < self.relative.high and self.fit.contains(self.theory + 1.0)
        other = self.theory + 1.0 if self.quantity == "time" or self.theory < 2 else self.theory - 1.0
        return self.fit.contains(self.theory) and self.fit.contains(other)

    @property
    def dominates(self) -> str:
        """Where the leading term is most of the fitted value: "3 of 4 sizes" (empty without a fit)."""
        return "" if self.fit is None else f"{self.fit.lead_points} of {self.fit.n} sizes"

    @property
    def check(self) -> str:
        if self.theory is None:
            return "no theory"
        if self.fit is None or self.n < MIN_POINTS:
            return f"n<{MIN_POINTS}"
        if self.relative is None and not self.fit.reached:
            return "leading term not reached"
        if self.relative is None and (fall := self.fall) is not None:
            return f"time falls ×{fall[2]:.2f} from {fall[0]:g} to {fall[1]:g}: not judged"
        if self.flagged:
            relative = self.relative
            return "OFF" if relative is None else \
                f"OFF: grows {self.axis}^{relative.exponent:.2f} faster than {relative.reference} beside it"
        if (departure := self.departure) is not None:
            return f"departure: {departure}"
        if self.undecided:
            return f"undecided: [{self.fit.low:.2f}, {self.fit.high:.2f}] holds {self.theory:g} and its neighbour"
        return f"ok (≤ {self.theory:g})" if self.upper_bound_only and self.fit.high < self.theory else "ok"

    def as_dict(self) -> dict[str, Any]:
        """The row for complexity.csv; exponents to 3 decimals (finer digits are noise, and vary with the BLAS)."""
        return {"implementation": self.implementation, "quantity": self.quantity, "axis": self.axis,
                "exponent": _round(self.slope, 3), "low": _round(self.low, 3), "high": _round(self.high, 3),
                "theory": self.theory, "off_by": _round(self.off_by, 3), "flagged": self.flagged, "check": self.check,
                "dominates": self.dominates, "regimes": "" if self.fit is None else " ".join(self.fit.regimes),
                "model": "" if self.fit is None else model_text(self.fit), "r2": _round(self.r2, 4), "n": self.n,
                "sweep": self.sweep}


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


def _series(s: Sweep, quantity: str, value: str, implementations: Mapping[str, Mapping[str, object]] | None
            ) -> list[tuple[str, pd.DataFrame, float | None]]:
    """(implementation, its points along the sweep, theory) for every implementation with two sizes or more."""
    out = []
    for name, group in s.frame.groupby("implementation", sort=True):
        sizes = pd.to_numeric(group[s.column], errors="coerce")
        values = pd.to_numeric(group[value], errors="coerce")
        fitted = (values > 0) & (values < math.inf) & (sizes > 0) & (sizes < math.inf)  # a log scale: both positive
        group = group[fitted].drop_duplicates(s.column, keep="last")
        if group[s.column].nunique() < 2:
            continue
        theory: float | None
        if quantity == "time":
            theory = WINDOW_TIME_THEORY if s.windowed and s.axis == "T" else TIME_THEORY[s.axis]
        else:
            theory = memory_theory(str(name), (implementations or {}).get(str(name)))
        out.append((str(name), group, theory))
    return out


def fit_rows(s: Sweep, quantity: str, value: str, implementations: Mapping[str, Mapping[str, object]] | None = None,
             drift: float | None = None) -> list[Row]:
    """One cost-model fit per implementation along the sweep's axis (the only place the report fits);
    ``drift``: the run's scatter between cells (:func:`harness.analysis.costmodel.run_scatter`), for time."""
    rows = []
    for name, group, theory in _series(s, quantity, value, implementations):
        samples = _samples(group) if quantity == "time" else None
        fit = fit_cost([float(x) for x in group[s.column]], [float(y) for y in group[value]], samples, theory=theory,
                       drift=drift if quantity == "time" else None, monotone=quantity == "time")
        relative = _relative(name, group, s.column) if quantity == "time" else None
        rows.append(Row(implementation=name, quantity=quantity, axis=s.axis, theory=theory, sweep=s.label, fit=fit,
                        relative=relative))
    return rows


def _relative(name: str, group: pd.DataFrame, column: str) -> Relative | None:
    """The implementation's growth relative to the one reference its cells were paired with at every size."""
    needed = ("reference", "ratio_to_ref", "ratio_low", "ratio_high")
    if any(c not in group for c in needed) or group["ratio_to_ref"].isna().any():
        return None
    references = set(group["reference"])
    if len(references) != 1 or name in references:
        return None
    return relative_growth(list(group[column]), list(group["ratio_to_ref"]), list(group["ratio_low"]),
                           list(group["ratio_high"]), str(references.pop()))


def _samples(group: pd.DataFrame) -> list[list[float]] | None:
    """Each size's raw timings (None when any size has fewer than two: the bootstrap needs them all)."""
    if "samples_s" not in group:
        return None
    out = []
    for samples in group["samples_s"]:
        if not isinstance(samples, (list, tuple)) or len(samples) < 2:
            return None
        out.append([float(x) for x in samples])
    return out


@dataclass(frozen=True)
class SweepFit:
    """A sweep and the fits along it: what a scaling plot draws and the complexity table lists."""

    name: str
    """The plot's file stem: time_vs_T, memory_vs_T, time_vs_d, time_vs_heads, time_vs_Tk, time_vs_T_window,
    time_vs_window or time_vs_T_varlen."""
    sweep: Sweep
    quantity: str
    value: str
    """The column fitted: "median" or :data:`MEMORY`."""
    rows: tuple[Row, ...]

    def row(self, implementation: str) -> Row | None:
        return next((r for r in self.rows if r.implementation == implementation), None)


SWEEPS = (("time_vs_T", "T", "median", False, False), ("time_vs_d", "d", "median", False, False),
          ("time_vs_heads", "heads", "median", False, False), ("time_vs_Tk", "Tk", "median", False, False),
          ("memory_vs_T", "T", MEMORY, False, False),
          ("time_vs_T_window", "T", "median", True, False),  # sliding-window cells: their own T sweep, theory T^1
          ("time_vs_window", "window", "median", True, False),  # the width at fixed T, theory 1
          ("time_vs_T_varlen", "T", "median", False, True))  # packed sequences: their own, theory T^2
"""(name, axis, value column, windowed, packed) of every sweep the report looks for."""


def sweep_fits(bench: pd.DataFrame, implementations: Mapping[str, Mapping[str, object]] | None = None) -> list[SweepFit]:
    """Every sweep the bench cells hold, each fitted once per implementation."""
    out: list[SweepFit] = []
    if bench.empty:
        return out
    found = [(name, value, s) for name, axis, value, windowed, packed in SWEEPS
             if (s := sweep(bench, axis, value, windowed=windowed, packed=packed)) is not None]
    drift = run_scatter((list(g[s.column]), list(g[value]), theory) for _, value, s in found if value != MEMORY
                        for _, g, theory in _series(s, "time", value, implementations))
    for name, value, s in found:
        quantity = "memory" if value == MEMORY else "time"
        out.append(SweepFit(name, s, quantity, value, tuple(fit_rows(s, quantity, value, implementations, drift))))
    return out


def sorted_rows(fits: list[SweepFit]) -> list[Row]:
    """The complexity table's order: by implementation, time before memory, then axis."""
    order = {"time": 0, "memory": 1}
    rows = [r for f in fits for r in f.rows]
    return sorted(rows, key=lambda r: (r.implementation, order[r.quantity], list(AXES).index(r.axis)))


def complexity_table(bench: pd.DataFrame, implementations: Mapping[str, Mapping[str, object]] | None = None) -> list[Row]:
    """Time exponents in T, d and heads, and the memory exponent in T, for every implementation."""
    return sorted_rows(sweep_fits(bench, implementations))
