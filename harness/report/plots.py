"""The report's figures, drawn with matplotlib's Agg backend (no display, deterministic PNGs): the scaling,
throughput, speedup and per-case figures here with the style every figure shares, the roofline in
:mod:`harness.report.roofline`, the verify figures in :mod:`harness.report.verify_plots`, the structures' in
:mod:`harness.report.structure_plots`.

Each function draws one figure from what the analysis (:mod:`harness.report.findings`) derived,
or from the tidy tables where nothing is derived, and returns a :class:`Plot` (or None when the
results hold nothing to draw); none fits anything. Scaling plots are log-log: the measured points
and, as a thin line, the cost model the analysis fitted, with the leading exponent and its
interval in the legend; dashed guide lines show what O(T^2) and O(T) look like through the same
starting point.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from harness.analysis.growth import Row
from harness.analysis.slices import Sweep, sweep
from harness.analysis.sweepfits import SweepFit
from harness.report.findings import speedup_table
from harness.results import Peak, PeakKey
from harness.results.paths import write_atomic

DPI = 100
PLOT_NAMES = ("time_vs_T", "memory_vs_T", "time_vs_d", "time_vs_heads", "throughput_vs_T", "speedup_vs_T",
              "correctness", "time_per_case", "error_vs_T", "time_vs_Tk", "roofline")
AXIS_LABEL = {"T": "sequence length T", "d": "head dim d", "heads": "heads H", "Tk": "cached keys Tk (decode)",
              "window": "window width (keys left + right of the diagonal)"}


@dataclass(frozen=True)
class Plot:
    name: str
    """File stem: plots/<name>.png."""
    title: str
    path: Path
    caption: str
    texts_outside: tuple[str, ...] = ()
    """Parts of the rendered figure (panels with their texts, legends, notes) still past its canvas after
    :func:`fit_texts` (none, normally)."""


MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
STYLES = ("-", "--", "-.", ":")


def _text(value: object) -> str:
    """A label from a result file, with matplotlib's mathtext ``$`` disarmed."""
    return str(value).replace("$", r"\$")


class LineStyle(TypedDict, total=False):
    """The keywords that set one line apart in matplotlib's ``plot``."""

    marker: str
    linestyle: str
    markersize: float
    alpha: float
    color: str


def _style(i: int) -> LineStyle:
    """Distinct marker and line style per line, so identical curves stay visible on top of each other."""
    return {"marker": MARKERS[i % len(MARKERS)], "linestyle": STYLES[(i // len(MARKERS)) % len(STYLES)],
            "markersize": 7 - (i % 3), "alpha": 0.9}


def _save(fig: Any, out: Path, name: str, title: str, caption: str,
          rect: tuple[float, float, float, float] = (0, 0, 1, 1)) -> Plot:
    path = out / f"{name}.png"
    outside = fit_texts(fig, rect)
    image = io.BytesIO()
    fig.savefig(image, format="png", dpi=DPI, metadata={"Software": "attnbench"})
    plt.close(fig)
    write_atomic(path, image.getvalue())  # whole or not at all, never through a link
    return Plot(name=name, title=title, path=path, caption=caption, texts_outside=outside)


def texts_outside(fig: Any) -> list[tuple[str, Any]]:
    """(what, its box in pixels) for each part of the rendered ``fig`` that reaches past the canvas by more than a
    pixel: a panel with its drawn tick labels, axis labels, title and legend (``get_tightbbox``: what is drawn,
    not ticks outside the view), a figure legend, a figure text."""
    renderer = fig.canvas.get_renderer()
    canvas = fig.bbox
    parts = [(f"panel {ax.get_title() or i}", ax.get_tightbbox(renderer))
             for i, ax in enumerate(fig.axes) if ax.get_visible()]
    parts += [("figure legend", legend.get_window_extent(renderer)) for legend in fig.legends]
    parts += [(f"text {text.get_text()}", text.get_window_extent(renderer)) for text in fig.texts
              if text.get_visible() and text.get_text().strip()]
    return [(what, box) for what, box in parts if box is not None and (
        box.x0 < canvas.x0 - 1 or box.y0 < canvas.y0 - 1 or box.x1 > canvas.x1 + 1 or box.y1 > canvas.y1 + 1)]


def fit_texts(fig: Any, rect: tuple[float, float, float, float] = (0, 0, 1, 1), tries: int = 4) -> tuple[str, ...]:
    """Lay ``fig`` out (``tight_layout`` within ``rect``), and while parts of it reach past the canvas grow it by
    their overflow and lay it out again, up to ``tries`` times; what is still outside then (nothing, normally)."""
    for attempt in range(tries + 1):
        fig.tight_layout(rect=rect)
        fig.canvas.draw()
        outside = texts_outside(fig)
        if not outside or attempt == tries:
            return tuple(what for what, _ in outside)
        canvas = fig.bbox
        left = max(canvas.x0 - min(b.x0 for _, b in outside), 0.0)
        right = max(max(b.x1 for _, b in outside) - canvas.x1, 0.0)
        below = max(canvas.y0 - min(b.y0 for _, b in outside), 0.0)
        above = max(max(b.y1 for _, b in outside) - canvas.y1, 0.0)
        width, height = fig.get_size_inches()
        fig.set_size_inches(width + (left + right) / fig.dpi + 0.2, height + (below + above) / fig.dpi + 0.2)
    return ()


def _guide(ax: Any, xs: list[float], x0: float, y0: float, power: float, label: str, style: str) -> None:
    lo, hi = min(xs), max(xs)
    ax.plot([lo, hi], [y0 * (lo / x0) ** power, y0 * (hi / x0) ** power], style, color="0.55",
            linewidth=1.2, label=label, zorder=1)


def _model_line(ax: Any, row: Row | None, xs: list[float], scale: float, color: str) -> None:
    """The fitted cost model as a thin line through the sweep's range, in the points' colour."""
    if row is None or row.fit is None:
        return
    lo, hi = min(xs), max(xs)
    grid = np.geomspace(lo, hi, 50)
    ax.plot(grid, row.fit.predict(grid) / scale, color=color, linewidth=1.0, alpha=0.8, zorder=2)


def _fit_label(name: object, row: Row | None) -> str:
    if row is not None and row.too_few:
        return _text(f"{name} (too few points to fit)")
    if row is None or row.fit is None:
        return _text(name)
    flag = ", OFF" if row.flagged else ", undecided" if row.undecided else "" if row.fit.reached else ", lead not reached"
    return _text(f"{name} (p {row.fit.exponent:.2f} [{row.fit.low:.2f}, {row.fit.high:.2f}]{flag})")


def quartiles(samples: object) -> tuple[float, float] | None:
    """(q1, q3) of a cell's raw samples (None with fewer than two)."""
    from harness.analysis.stats import quantile

    if not isinstance(samples, (list, tuple)) or len(samples) < 2:
        return None
    xs = sorted(float(x) for x in samples)
    return quantile(xs, 0.25), quantile(xs, 0.75)


def _errors(points: list[float], bounds: list[tuple[float, float] | None]) -> Any:
    """matplotlib's yerr (distances below and above each point) from (low, high) bounds; None when any is missing."""
    if not points or any(b is None for b in bounds):
        return None
    return np.array([[max(p - b[0], 0.0) for p, b in zip(points, bounds) if b is not None],
                     [max(b[1] - p, 0.0) for p, b in zip(points, bounds) if b is not None]])


def _time_bars(group: pd.DataFrame, value: str, scale: float) -> Any:
    """Each time point's interquartile range, scaled as the points are."""
    if value != "median" or "samples_s" not in group:
        return None
    bounds = [None if (q := quartiles(s)) is None else (q[0] / scale, q[1] / scale) for s in group["samples_s"]]
    return _errors([float(y) / scale for y in group[value]], bounds)


def scaling_plot(sf: SweepFit, out: Path) -> Plot:
    """Time (or peak memory) against one axis on log-log axes: each implementation's points and, as a
    thin line of the same colour, its fitted cost model; the legend gives the leading exponent."""
    s, value, axis = sf.sweep, sf.value, sf.sweep.axis
    memory = sf.quantity == "memory"
    scale = 2**20 if memory else 1e-3
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    for i, (name, group) in enumerate(s.frame.groupby("implementation", sort=True)):
        group = group[group[value] > 0]
        if group.empty:
            continue
        style: LineStyle = {**_style(i), "linestyle": "none", "color": f"C{i % 10}"}
        row = sf.row(str(name))
        ax.errorbar(group[s.column], group[value] / scale, yerr=_time_bars(group, value, scale), capsize=2,
                    label=_fit_label(name, row), zorder=3, **style)
        _model_line(ax, row, [float(x) for x in group[s.column]], scale, f"C{i % 10}")
    xs = sorted(float(x) for x in s.frame[s.column].unique())
    anchor = s.frame[s.frame[s.column] == xs[0]][value]
    anchor = anchor[anchor > 0]
    if not anchor.empty:
        y0 = float(anchor.median()) / scale
        if axis == "T" and not s.windowed:
            _guide(ax, xs, xs[0], y0, 2.0, "O(T²) guide", "--")
            if memory:
                _guide(ax, xs, xs[0], y0, 1.0, "O(T) guide", ":")
        else:
            _guide(ax, xs, xs[0], y0, 1.0, f"O({axis}) guide", "--" if axis != "window" else ":")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel(AXIS_LABEL[axis])
    ax.set_ylabel("peak memory of one call, output included (MiB)" if memory else "median time (ms)")
    what = "Peak memory" if memory else "Time"
    ax.set_title(_text(f"{what} vs {axis} ({s.label})"), fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    caption = (f"{what} against {axis} on log-log axes: points measured (time: the median, its bar the interquartile "
               "range of the samples), thin lines the fitted cost model "
               "(lower-order terms plus a leading power term); legend: the leading exponent p with its interval. "
               f"Fixed: {s.label}.")
    if memory:
        caption += (" Memory is the call's output plus the extra bytes at its peak (bench's peak_extra_bytes, "
                    "in bench.csv), so O(T²) against O(T) shows as it does in the FlashAttention papers.")
    return _save(fig, out, sf.name, f"{what} vs {axis}", caption)


def throughput_plot(bench: pd.DataFrame, out: Path, peaks: Mapping[PeakKey, Peak]) -> Plot | None:
    """GFLOP/s and % of the measured peak against T."""
    s = sweep(bench, "T", "gflops")
    if s is None:
        return None
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5))
    for i, (name, group) in enumerate(s.frame.groupby("implementation", sort=True)):
        rates = [None if (q := quartiles(smp)) is None or q[0] <= 0 else (float(f) / q[1] / 1e9, float(f) / q[0] / 1e9)
                 for smp, f in zip(group["samples_s"] if "samples_s" in group else [None] * len(group), group["flops"])]
        left.errorbar(group["tq"], group["gflops"], yerr=_errors([float(g) for g in group["gflops"]], rates),
                      capsize=2, label=_text(name), **_style(i))
        if group["pct_peak"].notna().any():
            right.plot(group["tq"], group["pct_peak"], label=_text(name), **_style(i))
    kind = s.fixed.get("node_kind")
    peak = _gflops(peaks.get(PeakKey(str(s.fixed.get("dtype")), str(s.fixed.get("device")),
                                     kind if isinstance(kind, str) else None)))
    if isinstance(peak, (int, float)):
        left.axhline(peak, color="0.4", linestyle="--", label=f"measured peak {peak:.0f} GFLOP/s")
    right.axhline(100, color="0.4", linestyle="--", label="100% of peak")
    for ax, ylabel in ((left, "GFLOP/s"), (right, "% of measured peak")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel(AXIS_LABEL["T"])
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(_text(f"Throughput vs T ({s.label})"), fontsize=10)
    return _save(fig, out, "throughput_vs_T", "GFLOP/s and % of peak vs T",
                 f"Achieved GFLOP/s (4·B·H·Tq·Tk·d per forward; bars: from the samples' interquartile range) and "
                 "share of the GEMM peak measured in the same run. "
                 f"Fixed: {s.label}.")


def speedup_frame(bench: pd.DataFrame, baseline: str) -> tuple[Sweep | None, pd.DataFrame]:
    """Per T in the main sweep: baseline median / implementation median (:func:`harness.report.findings.speedup_table`)."""
    return speedup_table(bench, baseline)


def _speedup_bounds(bench: pd.DataFrame | None, name: str, baseline: str,
                    ts: list[int]) -> list[tuple[float, float] | None]:
    """Per T, the interval of ``baseline``'s time over ``name``'s (:func:`harness.report.headline.ratio_interval`:
    paired over interleaved rounds where they were timed together)."""
    from harness.report.headline import ratio_interval

    s = None if bench is None or bench.empty else sweep(bench, "T", "median")
    if s is None or name == baseline:
        return [None] * len(ts)
    frame = s.frame
    out: list[tuple[float, float] | None] = []
    for t in ts:
        mine = frame[(frame["implementation"] == name) & (frame["tq"] == t)]
        base = frame[(frame["implementation"] == baseline) & (frame["tq"] == t)]
        found = None if mine.empty or base.empty else ratio_interval(mine.iloc[-1], base.iloc[-1])
        out.append(None if found is None else (found[0], found[1]))
    return out


def speedup_plot(table: pd.DataFrame, out: Path, baseline: str, label: str,
                 bench: pd.DataFrame | None = None) -> Plot | None:
    """Each implementation's speedup over ``baseline`` against T (``table``: the analysis's speedups), with its
    interval from ``bench``'s cells when given."""
    if table.empty:
        return None
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for i, (name, group) in enumerate(table.groupby("implementation", sort=True)):
        style = {"color": "k", "linestyle": "--"} if name == baseline else _style(i)
        bounds = _speedup_bounds(bench, str(name), baseline, [int(t) for t in group["T"]])
        yerr = _errors([float(v) for v in group["speedup"]], bounds) if any(b is not None for b in bounds) else None
        ax.errorbar(group["T"], group["speedup"], yerr=yerr, capsize=2, label=_text(name), **style)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel(AXIS_LABEL["T"])
    ax.set_ylabel(_text(f"speedup over {baseline} (×)"))
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(_text(f"Speedup vs {baseline} ({label})"), fontsize=10)
    return _save(fig, out, "speedup_vs_T", f"Speedup vs {baseline}",
                 f"{baseline}'s median time divided by each implementation's (above 1: faster); bars: the interval of "
                 "the ratio (over interleaved rounds where both were timed in them, else from the interquartile "
                 f"ranges). Fixed: {label}.")


MAX_CASES = 16


def per_case_plot(bench: pd.DataFrame, out: Path) -> Plot | None:
    """Median time per case, one bar per implementation: for results with no sweep (pytest-benchmark)."""
    ok = bench[(bench["status"] == "ok") & bench["median"].notna()] if not bench.empty else bench
    if ok.empty:
        return None
    cases = sorted(ok["case_id"].astype(str).unique())[:MAX_CASES]
    impls = sorted(ok["implementation"].astype(str).unique())
    width = 0.8 / len(impls)
    fig, ax = plt.subplots(figsize=(8, 1.2 + 0.35 * len(cases) * max(1, len(impls) / 3)))
    for i, name in enumerate(impls):
        rows = ok[ok["implementation"] == name].set_index("case_id")["median"]
        ys = [j + i * width for j, c in enumerate(cases) if c in rows.index]
        ax.barh(ys, [rows[c] * 1e3 for c in cases if c in rows.index], height=width, label=_text(name))
    ax.set_yticks([j + 0.4 - width / 2 for j in range(len(cases))], [_text(c) for c in cases], fontsize=7)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("median time (ms)")
    ax.grid(True, axis="x", which="both", alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("Median time per case", fontsize=10)
    return _save(fig, out, "time_per_case", "Time per case",
                 f"Median time of each implementation at each case (first {MAX_CASES} cases by id).")


def _gflops(peak: Peak | None) -> float | None:
    return None if peak is None else Peak.coerce(peak).gflops  # a caller may hand the stored form
