"""Sweeps and scaling: which cells form a sweep along T, d or heads, and their fitted cost models.

A sweep is the set of cells that differ only along one axis (all other case fields and the
mode fixed). Of all candidate slices the one with the most points is the report's sweep,
preferring the forward pass without causal masking, so that a plot shows one clean line per
implementation. Each implementation's points are fitted with the cost model of
:mod:`harness.analysis.costmodel`: the lower-order terms the algorithm has (a constant, and
for an O(T^2) cost a term in T) plus a leading power term, whose exponent comes with an
interval from the raw samples and with the regime each size is in.

Theory: time grows as T^2, d and heads (:data:`harness.analysis.scaling.AXES`); peak memory as T^2 for an
implementation that materialises the (Tq, Tk) score matrix and as T for a tiled (FlashAttention-style) one.
Each fit's verdict against theory is a :class:`harness.analysis.growth.Row`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from harness.analysis.costmodel import fit_cost, run_scatter
from harness.analysis.fitrecords import fit_key, row_record
from harness.analysis.growth import Relative, Row, memory_theory, relative_growth
from harness.analysis.points import point_frame
from harness.analysis.scaling import AXES as FIT_AXES  # the axes, their case fields and theory: defined once
from harness.analysis.scaling import Axis, cell_fits
from harness.results import BenchCell, Cell

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
    """One cost-model fit per implementation along the sweep's axis (:func:`keyed_fit_rows`, nothing stored)."""
    return [row for _, row in keyed_fit_rows(s, quantity, value, implementations, drift)]


def keyed_fit_rows(s: Sweep, quantity: str, value: str, implementations: Mapping[str, Mapping[str, object]] | None = None,
                   drift: float | None = None, stored: Mapping[str, Row] | None = None, name: str = ""
                   ) -> list[tuple[str, Row]]:
    """(key, fit) per implementation along the sweep's axis: the fit ``stored`` under the key of its inputs
    (:mod:`harness.analysis.fitrecords`), else one cost-model fit; ``drift``: the run's scatter between cells
    (:func:`harness.analysis.costmodel.run_scatter`), for time; ``name``: the sweep's (:data:`SWEEPS`)."""
    rows = []
    for implementation, group, theory in _series(s, quantity, value, implementations):
        samples = _samples(group) if quantity == "time" else None
        xs, ys = [float(x) for x in group[s.column]], [float(y) for y in group[value]]
        key = fit_key([name, s.label, s.axis, implementation, quantity, theory, xs, ys, samples,
                       drift if quantity == "time" else None,
                       [list(group[c]) for c in RELATIVE_COLUMNS if c in group] if quantity == "time" else None,
                       [list(group[c]) for c in ("tq", "tk", "dtype")] if quantity == "memory" else None])
        row = (stored or {}).get(key)
        if row is None:
            fit = fit_cost(xs, ys, samples, theory=theory, drift=drift if quantity == "time" else None,
                           monotone=quantity == "time")
            relative = _relative(implementation, group, s.column) if quantity == "time" else None
            row = Row(implementation=implementation, quantity=quantity, axis=s.axis, theory=theory, sweep=s.label,
                      fit=fit, relative=relative, scores_bytes=_scores_bytes(group) if quantity == "memory" else None)
        rows.append((key, row))
    return rows


def _scores_bytes(group: pd.DataFrame) -> float | None:
    """One head's (Tq, Tk) score matrix at the sweep's largest size, in the cells' dtype (None when unknown)."""
    from harness.case.dtypes import itemsize

    try:
        last = group.loc[pd.to_numeric(group["tq"]).idxmax()]
        return float(int(last["tq"]) * int(last["tk"]) * itemsize(str(last["dtype"])))
    except (KeyError, ValueError, TypeError):
        return None


def _relative(name: str, group: pd.DataFrame, column: str) -> Relative | None:
    """The implementation's growth relative to the one reference its cells were paired with at every size."""
    if any(c not in group for c in RELATIVE_COLUMNS) or group["ratio_to_ref"].isna().any():
        return None
    references = set(group["reference"])
    if len(references) != 1 or name in references:
        return None
    return relative_growth(list(group[column]), list(group["ratio_to_ref"]), list(group["ratio_low"]),
                           list(group["ratio_high"]), str(references.pop()))


RELATIVE_COLUMNS = ("reference", "ratio_to_ref", "ratio_low", "ratio_high")
"""What a growth relative to the reference is fitted from: each size's paired ratio and its interval."""


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
    """The plot's file stem (:data:`SWEEPS`)."""
    sweep: Sweep
    quantity: str
    value: str
    """The column fitted: "median" or :data:`MEMORY`."""
    rows: tuple[Row, ...]
    keys: tuple[str, ...] = ()
    """Each row's key: a digest of everything it was fitted from (:func:`harness.analysis.fitrecords.fit_key`)."""

    def row(self, implementation: str) -> Row | None:
        return next((r for r in self.rows if r.implementation == implementation), None)


@dataclass(frozen=True)
class FitSweep:
    """One sweep bench and the report look for in the bench cells (:func:`sweep` finds its largest slice)."""

    name: str
    """The plot's file stem: time_vs_T, memory_vs_T, time_vs_d, ..."""
    axis: str
    value: str
    """The column fitted: "median" (time) or :data:`MEMORY`."""
    windowed: bool = False
    """Cells with a sliding window (their own T sweep, theory T^1; or the width at fixed T)."""
    packed: bool = False
    """Cells of packed sequences (their own T sweep, theory T^2)."""

    @property
    def quantity(self) -> str:
        return "memory" if self.value == MEMORY else "time"


SWEEPS = (FitSweep("time_vs_T", "T", "median"), FitSweep("time_vs_d", "d", "median"),
          FitSweep("time_vs_heads", "heads", "median"), FitSweep("time_vs_Tk", "Tk", "median"),
          FitSweep("memory_vs_T", "T", MEMORY), FitSweep("time_vs_T_window", "T", "median", windowed=True),
          FitSweep("time_vs_window", "window", "median", windowed=True),
          FitSweep("time_vs_T_varlen", "T", "median", packed=True))
"""Every sweep fitted, defined once: bench fits them when a run finishes and stores the fits, the report
finds the same ones and reads those fits."""


def sweep_fits(bench: pd.DataFrame, implementations: Mapping[str, Mapping[str, object]] | None = None,
               stored: Mapping[str, Row] | None = None) -> list[SweepFit]:
    """Every sweep the bench cells hold, with one fit per implementation: the one ``stored`` for the same inputs
    (:func:`harness.analysis.fitrecords.stored_rows`), else fitted here; the only place a cost model is fitted."""
    out: list[SweepFit] = []
    if bench.empty:
        return out
    found = [(plan, s) for plan in SWEEPS
             if (s := sweep(bench, plan.axis, plan.value, windowed=plan.windowed, packed=plan.packed)) is not None]
    drift = run_scatter((list(g[s.column]), list(g[plan.value]), theory) for plan, s in found if plan.value != MEMORY
                        for _, g, theory in _series(s, "time", plan.value, implementations))
    for plan, s in found:
        keyed = keyed_fit_rows(s, plan.quantity, plan.value, implementations, drift, stored, plan.name)
        out.append(SweepFit(plan.name, s, plan.quantity, plan.value, tuple(r for _, r in keyed),
                            tuple(k for k, _ in keyed)))
    return out


def cell_sweep_fits(cells: Iterable[Cell], implementations: Mapping[str, Mapping[str, object]] | None = None
                    ) -> list[dict[str, object]]:
    """The cost-model fits of bench's own cells as ``fits`` records (:mod:`harness.analysis.fitrecords`): what
    bench stores when a run finishes, so that the report reads them instead of fitting again."""
    frame = point_frame(c for c in cells if isinstance(c, BenchCell))
    return [record for f in sweep_fits(frame, implementations) for key, row in zip(f.keys, f.rows)
            if (record := row_record(f.name, key, row)) is not None]


def run_fits(cells: Sequence[Cell], implementations: Mapping[str, Mapping[str, object]] | None = None
             ) -> list[dict[str, object]]:
    """Every fit bench stores when a run finishes: the log-log exponents and O(g) coefficients it prints
    (:func:`harness.analysis.scaling.cell_fits`), then the cost-model fits the report reads
    (:func:`cell_sweep_fits`, each with ``"model": "cost"``)."""
    return cell_fits(cells) + cell_sweep_fits(cells, implementations)


def sorted_rows(fits: list[SweepFit]) -> list[Row]:
    """The complexity table's order: by implementation, time before memory, then axis."""
    order = {"time": 0, "memory": 1}
    rows = [r for f in fits for r in f.rows]
    return sorted(rows, key=lambda r: (r.implementation, order[r.quantity], list(AXES).index(r.axis)))


def complexity_table(bench: pd.DataFrame, implementations: Mapping[str, Mapping[str, object]] | None = None) -> list[Row]:
    """Time exponents in T, d and heads, and the memory exponent in T, for every implementation."""
    return sorted_rows(sweep_fits(bench, implementations))
