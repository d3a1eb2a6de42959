"""The verify figures: the correctness matrix as a coloured grid, and the error against the float64 oracle as T
grows. Drawn from the tables the analysis built (:mod:`harness.report.findings`); nothing is judged here."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.artist import Artist
from matplotlib.patches import Rectangle

from harness.report.plots import AXIS_LABEL, Plot, _save, _style, _text

STATUS_COLOURS = {"pass": "#3a9d5d", "fail": "#d64541", "error": "#d64541", "crash": "#8e2c9e",
                  "timeout": "#e08a1e", "skipped": "#c8c8c8", "none": "#ffffff"}


def correctness_plot(matrix: pd.DataFrame, out: Path) -> Plot | None:
    """The correctness matrix as a coloured grid (the HTML shows the same as a table)."""
    if matrix.empty:
        return None
    impls, groups = list(matrix.index), list(matrix.columns)
    fig, ax = plt.subplots(figsize=(1.6 + 1.3 * len(groups), 0.9 + 0.45 * len(impls)))
    for i, impl in enumerate(impls):
        for j, group in enumerate(groups):
            cell = matrix.loc[impl, group]
            status, text = (cell["status"], cell["text"]) if isinstance(cell, dict) else ("none", "")
            ax.add_patch(Rectangle((j, i), 1, 1, color=STATUS_COLOURS.get(status, "#ffffff"), ec="white"))
            ax.text(j + 0.5, i + 0.5, _text(text), ha="center", va="center", fontsize=7)
    ax.set_xlim(0, len(groups))
    ax.set_ylim(len(impls), 0)
    ax.set_xticks([j + 0.5 for j in range(len(groups))], [_text(g) for g in groups], rotation=30, ha="right", fontsize=8)
    ax.set_yticks([i + 0.5 for i in range(len(impls))], [_text(i) for i in impls], fontsize=8)
    ax.set_title("Correctness: worst error / bound (1 is the edge) and error / baseline's", fontsize=10)
    return _save(fig, out, "correctness", "Correctness matrix",
                 "Per implementation and case group: pass / fail / skipped; err/bound is the worst error over its "
                 "bound (a pass is at most 1), ×base the worst error over the same-dtype baseline's where that "
                 "baseline sets the bound.")


def error_growth_plot(growth: pd.DataFrame, out: Path) -> Plot | None:
    """Max error against the float64 oracle vs T over the verify rule's bound for that case (1 is the edge of a
    pass), one panel per dtype, the same-dtype baseline's error over the same bound dashed. Where a file holds no
    bounds (an older one), the absolute errors."""
    growth = growth[growth["max_abs_err"].notna() & (growth["max_abs_err"] > 0)]
    if growth.empty or growth["T"].nunique() < 2:
        return None
    bounds = pd.to_numeric(growth["bound"], errors="coerce") if "bound" in growth else None
    relative = bounds is not None and bool((bounds > 0).all())
    if relative:
        growth = growth.assign(err=growth["max_abs_err"] / bounds, base=growth["base_err"] / bounds)
    else:
        growth = growth.assign(err=growth["max_abs_err"], base=growth["base_err"])
    dtypes = [d for d in ("float16", "bfloat16", "float32", "float64") if d in set(growth["dtype"])]
    dtypes += sorted(set(growth["dtype"]) - set(dtypes))
    names = sorted(set(growth["implementation"]))  # one style per implementation across the panels
    fig, axes = plt.subplots(1, len(dtypes), figsize=(4.2 * len(dtypes), 4.4), squeeze=False)
    for ax, dtype in zip(axes[0], dtypes):
        frame = growth[growth["dtype"] == dtype].sort_values("T")
        for name, group in frame.groupby("implementation", sort=True):
            index = names.index(str(name))
            ax.plot(group["T"], group["err"], label=_text(name), color=f"C{index % 10}", **_style(index))
        base = frame[frame["base"] > 0].groupby("T")["base"].median()
        if not base.empty:
            ax.plot(base.index, base.values, color="black", linestyle="--", linewidth=1.5, label="baseline (same dtype)")
        if relative:
            ax.axhline(1.0, color="#d64541", linewidth=1.2, label="bound (above: a fail)")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel(AXIS_LABEL["T"])
        ax.set_title(_text(dtype), fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].set_ylabel("max |out - oracle| / bound" if relative else "max |out - oracle|")
    handles: dict[str, Artist] = {}
    for ax in axes[0]:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    rows = -(-len(handles) // 6)
    fig.legend(handles.values(), handles.keys(), loc="lower center", ncol=min(len(handles), 6), fontsize=8)
    caption = (("Max error against the float64 oracle over the verify rule's bound for the case, as T grows (B1, H1, "
                "d64, forward), per dtype: at or under 1 (the red line) is a pass. " if relative else
                "Max absolute error against the float64 oracle as T grows (B1, H1, d64, forward), per dtype. ")
               + "Dashed: the textbook formula in the same dtype, the yardstick of the rule. A line that rises away "
               "from the dashed one is error growing with sequence length.")
    return _save(fig, out, "error_vs_T", "Error vs T", caption, rect=(0, 0.06 * rows, 1, 1))
