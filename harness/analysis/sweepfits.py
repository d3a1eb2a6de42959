"""The sweeps bench and the report fit, defined once (:data:`SWEEPS`), and their fitted cost models.

Each sweep is found in the bench cells by :func:`harness.analysis.slices.sweep`. Each implementation's points are
fitted with the cost model of
:mod:`harness.analysis.costmodel`: the lower-order terms the algorithm has (a constant, and
for an O(T^2) cost a term in T) plus a leading power term, whose exponent comes with an
interval from the raw samples and with the regime each size is in.

Theory: time grows as T^2, d and heads (:data:`harness.analysis.scaling.AXES`); peak memory as T^2 for an
implementation that materialises the (Tq, Tk) score matrix and as T for a tiled (FlashAttention-style) one.
Each fit's verdict against theory is a :class:`harness.analysis.growth.Row`.

Fits are never stored: bench prints them and the report shows them, each fitting the cells it read here.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import pandas as pd

from harness.analysis.costmodel import fit_cost, run_scatter
from harness.analysis.growth import Relative, Row, memory_theory, relative_growth, without_short_fit
from harness.analysis.points import point_columns
from harness.analysis.scaling import AXES as FIT_AXES  # the axes, their case fields and theory: defined once
from harness.analysis.scaling import MIN_POINTS
from harness.analysis.slices import AXES, Sweep, sweep
from harness.results import BenchCell, Cell

TIME_THEORY = {name: axis.time_theory for name, axis in FIT_AXES.items()}
"""Tk: decode steps (Tq < Tk, a KV cache of Tk keys): the work and the bytes read grow as Tk."""
WINDOW_TIME_THEORY = 1.0
"""Under a sliding window of fixed width the attended pairs, and the time of a kernel that skips the
blocks outside it, grow as T: cells with a window are fitted in a sweep of their own against this."""
MEMORY = "peak_bytes"
"""The memory a call needs: its output plus bench's ``peak_extra_bytes`` (the extra at the peak,
above inputs and output). With the output counted, a tiled kernel is O(T) as FlashAttention
states it, and a materialising one O(T^2); the extra alone of a tiled kernel is a few tiles, O(1)."""


def _series(s: Sweep, quantity: str, value: str, implementations: Mapping[str, Mapping[str, object]] | None
            ) -> list[tuple[str, pd.DataFrame, float | None]]:
    """(implementation, its points along the sweep, theory) for every implementation with two sizes or more (fewer
    than :data:`~harness.analysis.scaling.MIN_POINTS`: listed as too few points, never fitted)."""
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
    """One cost-model fit per implementation along the sweep's axis; ``drift``: the run's scatter between cells
    (:func:`harness.analysis.costmodel.run_scatter`), for time."""
    rows = []
    for implementation, group, theory in _series(s, quantity, value, implementations):
        if group[s.column].nunique() < MIN_POINTS:  # too few points: no fit, said so
            row = Row(implementation=implementation, quantity=quantity, axis=s.axis, theory=theory, sweep=s.label,
                      points=int(group[s.column].nunique()))
        else:
            xs, ys = [float(x) for x in group[s.column]], [float(y) for y in group[value]]
            fit = fit_cost(xs, ys, _samples(group) if quantity == "time" else None, theory=theory,
                           drift=drift if quantity == "time" else None, monotone=quantity == "time")
            relative = _relative(implementation, group, s.column) if quantity == "time" else None
            row = Row(implementation=implementation, quantity=quantity, axis=s.axis, theory=theory, sweep=s.label,
                      fit=fit, relative=relative, scores_bytes=_scores_bytes(group) if quantity == "memory" else None)
        rows.append(without_short_fit(row))
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
    drift: float | None = None
    """The run's scatter between cells that the time fits read (:func:`harness.analysis.costmodel.run_scatter`),
    measured on the same cells' time series."""

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
"""Every sweep fitted, defined once: bench's printed fits and the report's find and fit the same sweeps."""


def sweep_fits(bench: pd.DataFrame, implementations: Mapping[str, Mapping[str, object]] | None = None
               ) -> list[SweepFit]:
    """Every sweep the bench cells hold, with one fit per implementation: the only place a cost model is fitted.
    The run's drift between cells that the time fits read is measured here too, on the same cells."""
    out: list[SweepFit] = []
    if bench.empty:
        return out
    found = [(plan, s) for plan in SWEEPS
             if (s := sweep(bench, plan.axis, plan.value, windowed=plan.windowed, packed=plan.packed)) is not None]
    series = [([float(x) for x in g[s.column]], [float(y) for y in g[plan.value]], theory) for plan, s in found
              if plan.value != MEMORY for _, g, theory in _series(s, "time", plan.value, implementations)]
    drift = run_scatter(series)
    for plan, s in found:
        rows = fit_rows(s, plan.quantity, plan.value, implementations, drift)
        out.append(SweepFit(plan.name, s, plan.quantity, plan.value, tuple(rows), drift))
    return out


def cell_fits(cells: Iterable[Cell], implementations: Mapping[str, Mapping[str, object]] | None = None
              ) -> list[SweepFit]:
    """The fits of one run's bench cells, as a report of its file fits them: each cell's key once, a cell measured
    again replacing the earlier one at its later place (:func:`harness.report.load.load` reads them so)."""
    live: dict[tuple[str, str, str], BenchCell] = {}
    for cell in cells:
        if isinstance(cell, BenchCell):
            key = (cell.implementation, cell.case_id, cell.mode or "fwd")
            live.pop(key, None)
            live[key] = cell
    frame = pd.DataFrame([{**point_columns(c), "case_id": c.case_id} for c in live.values()])
    return sweep_fits(frame, implementations)


def sorted_rows(fits: list[SweepFit]) -> list[Row]:
    """The complexity table's order: by implementation, time before memory, then axis."""
    order = {"time": 0, "memory": 1}
    rows = [r for f in fits for r in f.rows]
    return sorted(rows, key=lambda r: (r.implementation, order[r.quantity], list(AXES).index(r.axis)))


def complexity_table(bench: pd.DataFrame, implementations: Mapping[str, Mapping[str, object]] | None = None) -> list[Row]:
    """Time exponents in T, d and heads, and the memory exponent in T, for every implementation."""
    return sorted_rows(sweep_fits(bench, implementations))
