"""Figures of structured attention (docs/structures.md): time against T at a fixed sliding
window beside dense causal at the same T, and time against the window's width at a fixed T.

Under a window of fixed width the work grows as T, under dense causal as T^2: drawn together on
log-log axes, a kernel that skips the blocks outside the window shows slope 1 where the same kernel
given the window as a dense mask (or dense causal) shows slope 2. Against the width, the work grows
as the window (while it is much narrower than T).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import pandas as pd

from harness.analysis.slices import sweep
from harness.analysis.sweepfits import SweepFit
from harness.report.plots import AXIS_LABEL, LineStyle, Plot, _guide, _save, _style, _text

STRUCTURE_PLOT_NAMES = ("time_vs_T_window", "time_vs_window")


def _ok(bench: pd.DataFrame) -> pd.DataFrame:
    if bench.empty or "window" not in bench.columns:
        return bench.iloc[0:0]
    return bench[(bench["status"] == "ok") & bench["median"].notna() & (bench["median"] > 0)]


def window_vs_T_plot(bench: pd.DataFrame, out: Path, fits: SweepFit | None = None) -> Plot | None:
    """The window's T sweep, one solid line per implementation, and dense causal at the same fixed
    fields dashed in the same colour; ``fits`` (the analysis's fits of that sweep) put each fitted
    exponent in the legend."""
    s = fits.sweep if fits is not None else sweep(bench, "T", "median", windowed=True)
    if s is None:
        return None
    slopes = {row.implementation: row.slope for row in (fits.rows if fits is not None else ())}
    data = _ok(bench)
    same = {c: s.fixed[c] for c in ("batch", "heads", "kv_heads", "d", "dtype", "device", "mode", "mask")
            if c in s.fixed and c in data.columns}
    dense = data[data["window"].isna() & data["causal"].eq(True) & (data["tq"] == data["tk"])]
    for column, value in same.items():
        dense = dense[dense[column] == value]
    if "varlen" in dense.columns:
        dense = dense[dense["varlen"].isna()]
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    names = sorted(set(s.frame["implementation"]) | set(dense["implementation"]))
    for name in names:
        i = names.index(name)
        style: LineStyle = {**_style(i), "color": f"C{i % 10}"}
        dashed: LineStyle = {**style, "linestyle": "--", "alpha": 0.6}
        group = s.frame[s.frame["implementation"] == name].sort_values("tq")
        if not group.empty:
            slope = slopes.get(name)
            label = f"{_text(name)}, window (slope {slope:.2f})" if slope is not None else f"{_text(name)}, window"
            ax.plot(group["tq"], group["median"] * 1e3, label=label, zorder=3, **style)
        base = dense[dense["implementation"] == name].sort_values("tq")
        if len(base) >= 1:
            ax.plot(base["tq"], base["median"] * 1e3, label=f"{_text(name)}, dense causal", zorder=2,
                    **dashed)
    xs = sorted(float(x) for x in s.frame["tq"].unique())
    y0 = float(s.frame[s.frame["tq"] == xs[0]]["median"].median()) * 1e3
    _guide(ax, xs, xs[0], y0, 1.0, "O(T) guide", ":")
    _time_axes(ax, AXIS_LABEL["T"], _text(f"Time vs T, fixed window beside dense causal\n({s.label})"), 9, 7)
    return _save(fig, out, "time_vs_T_window", "Time vs T at a fixed window",
                 "Solid: a causal sliding window of fixed width (work O(T)); dashed, same colour: dense causal at the "
                 f"same T (work O(T²)); legend: the windowed sweep's fitted exponent. Fixed: {s.label}.")


def _time_axes(ax: Any, xlabel: str, title: str, title_size: int, legend_size: int) -> None:
    """Log-log axes of median time (ms) against a power-of-two size."""
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("median time (ms)")
    ax.set_title(title, fontsize=title_size)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=legend_size)


def window_width_plot(bench: pd.DataFrame, out: Path) -> Plot | None:
    """Time against the window's width (left + right) at the fixed T with the most widths measured."""
    data = _ok(bench)
    data = data[data["window"].notna() & (data["tq"] == data["tk"])] if not data.empty else data
    if data.empty:
        return None
    keys = ["tq", "batch", "heads", "d", "dtype", "mode", "causal"]
    best = max(data.groupby(keys), key=lambda kv: (kv[1]["window"].nunique(), len(kv[1])))
    frame = best[1].assign(width=best[1]["window_width"])  # the typed window's left + right (points.py)
    if frame["width"].nunique() < 2:
        return None
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    for i, (name, group) in enumerate(frame.groupby("implementation", sort=True)):
        group = group.sort_values("width")
        ax.plot(group["width"], group["median"] * 1e3, label=_text(name), **_style(i))
    widths = sorted(float(w) for w in frame["width"].unique())
    _guide(ax, widths, widths[0], float(frame[frame["width"] == widths[0]]["median"].median()) * 1e3, 1.0,
           "O(window) guide", ":")
    fixed = dict(zip(keys, best[0]))
    label = (f"T={fixed['tq']}, B={fixed['batch']}, H={fixed['heads']}, d={fixed['d']}, {fixed['dtype']}, {fixed['mode']}"
             + (", causal" if bool(fixed["causal"]) else ""))  # the typed case's bool (a window's cells all have one)
    _time_axes(ax, "window width (keys left + right of the diagonal)", _text(f"Time vs window width ({label})"), 10, 8)
    return _save(fig, out, "time_vs_window", "Time vs window width",
                 "Median time against the sliding window's width at one T: a kernel that skips the blocks outside the "
                 f"window grows as the window; one given a dense mask stays flat. Fixed: {_text(label)}.")
