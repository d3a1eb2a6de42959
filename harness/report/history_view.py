"""The history view: ``history.html``, ``history.md``, ``history.csv`` and ``plots/history.png``.

Formats a :class:`harness.report.history.History`; nothing is measured or fitted here. The
figure has one panel per implementation (those with a step first): each cell's median relative
to its first commit, with the median's 95% interval as error bars, and every detected step
marked where its new level starts, with the commit and the ratio.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes

from harness.report.history import History, Series
from harness.report.html import CSS, esc, image, table
from harness.report.markdown import md, md_table
from harness.report.plots import Plot, _save, _style, _text
from harness.report.tables import write_csv
from harness.results.paths import check_directory, refuse_link, write_atomic

MAX_PANELS = 12
MAX_LINES = 10
"""Cells drawn per panel (those with a step first); history.csv has every cell."""


@dataclass(frozen=True)
class HistoryFiles:
    html: Path
    markdown: Path
    csv: Path
    plot: Plot | None


def history_plot(h: History, out: Path) -> Plot | None:
    """One panel per implementation (those with steps first): each cell's median over the commits, relative to
    its first, with the detected steps marked."""
    names = sorted({s.implementation for s in h.series}, key=lambda n: (not any(
        s.steps for s in h.series if s.implementation == n), n))[:MAX_PANELS]
    if not names:
        return None
    cols = min(3, len(names))
    rows = -(-len(names) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.4 * rows), squeeze=False)
    labels = [c.label for c in h.commits]
    for ax, name in zip(axes.flat, names):
        series = sorted((s for s in h.series if s.implementation == name), key=lambda s: (not s.steps, s.case_id))
        _draw_series(ax, series[:MAX_LINES])
        _mark_steps(ax, series)
        ax.set_title(_text(name), fontsize=9)
        shown = _tick_positions(len(labels))
        ax.set_xticks(shown, [_text(labels[i][:7]) for i in shown], rotation=30, ha="right", fontsize=8)
        ax.set_xlabel("commit (oldest left)", fontsize=8)
        ax.set_ylabel("median / first commit's", fontsize=8)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=6)
    for ax in list(axes.flat)[len(names):]:
        ax.set_visible(False)
    return _save(fig, out, "history", "History across commits",
                 "Each cell's median time relative to its first commit, oldest commit left, with the median's 95% "
                 "interval from the raw samples; red dashed lines: detected steps (a penalised piecewise-constant "
                 "fit of the whole series), labelled with the commit where the new level starts and after / before.")


MAX_TICKS = 8
"""Commit labels a panel shows at most (the first, the last, and evenly between): more overlap at a panel's width."""


def _tick_positions(count: int) -> list[int]:
    """Positions of the commit labels a panel shows: every one up to :data:`MAX_TICKS`, else evenly spaced ends in."""
    if count <= MAX_TICKS:
        return list(range(count))
    return sorted({round(i * (count - 1) / (MAX_TICKS - 1)) for i in range(MAX_TICKS)})


def _draw_series(ax: Axes, series: Sequence[Series]) -> None:
    """Each cell's medians relative to its first commit's, with the median's interval as error bars."""
    for i, s in enumerate(series):
        first, style = s.points[0].median, _style(i)
        err = [[(p.median - p.low) / first for p in s.points], [(p.high - p.median) / first for p in s.points]]
        ax.errorbar([p.position for p in s.points], [p.median / first for p in s.points], yerr=err,
                    label=_text(f"{s.case_id} {s.mode}"), capsize=2, color=f"C{i % 10}", marker=style["marker"],
                    linestyle=style["linestyle"], markersize=style["markersize"])


def _mark_steps(ax: Axes, series: Sequence[Series]) -> None:
    """Every cell's steps, drawn once per commit: the median ratio and how many cells stepped there."""
    marks: dict[tuple[int, str], list[float]] = {}
    for s in series:
        for step in s.steps:
            marks.setdefault((s.points[step.index].position, step.label), []).append(step.ratio)
    for (x, label), ratios in sorted(marks.items()):
        ax.axvline(x - 0.5, color="#d64541", linestyle="--", linewidth=1)
        cells = f", {len(ratios)} cells" if len(ratios) > 1 else ""
        ax.annotate(_text(f"{label[:7]} ×{float(np.median(ratios)):.2f}{cells}"), (x - 0.5, 1.0),
                    xycoords=("data", "axes fraction"), fontsize=7, color="#d64541", xytext=(3, -10),
                    textcoords="offset points")


def _step_rows(h: History) -> list[tuple[object, ...]]:
    return [(s.implementation, s.case_id, s.mode, step.label, step.before, step.after, f"×{step.ratio:.2f}",
             "" if verdict is None else verdict.verdict,
             "" if verdict is None or verdict.mde_or_none is None else f"{verdict.mde:.3f}x")
            for s, step, verdict in h.judged_steps]


STEP_HEADERS = ("implementation", "case", "mode", "commit", "median before (s)", "median after (s)", "ratio",
                "verdict (commit before vs this one)", "MDE")


def render_markdown(h: History, plot: Plot | None) -> str:
    out = ["# attnbench history", "",
           f"{len(h.commits)} commits (oldest first): " + ", ".join(f"`{md(c.label)}`" for c in h.commits), "",
           f"{len(h.series)} cells measured at two commits or more; **{len(h.steps)} step(s)** detected.", ""]
    if h.steps:
        out += [md_table(STEP_HEADERS, _step_rows(h)), ""]
    if plot is not None:
        out.append(f"![{md(plot.title)}](plots/{plot.path.name})")
    return "\n".join(out) + "\n"


def render_html(h: History, plot: Plot | None) -> str:
    parts = ["<h1>attnbench history</h1>",
             f"<p>{len(h.series)} cells measured at two commits or more; <b>{len(h.steps)} step(s)</b> detected "
             "(a penalised piecewise-constant fit of each cell's series of medians, as asv's step detection; "
             "changes below 5% are merged away).</p>"]
    if h.steps:
        parts.append("<h2>Steps</h2>" + table(STEP_HEADERS, _step_rows(h), numeric=[4, 5]))
    if plot is not None:
        parts.append(f"<figure id=\"history\">{image(plot.path, plot.title)}<figcaption>{esc(plot.caption)}"
                     "</figcaption></figure>")
    parts.append("<h2>Commits</h2>" + table(["#", "commit", "time", "run", "file"],
                                            [(i, c.label, c.time, c.run_id, c.path) for i, c in enumerate(h.commits)]))
    body = "\n".join(parts)
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>attnbench history</title>"
            f"<style>{CSS}</style></head>\n<body>\n{body}\n</body></html>\n")


def write_history(h: History, out: Path) -> HistoryFiles:
    """Write the history view under ``out`` (created if missing): each file whole or not at all, never through a
    link (:func:`harness.results.paths.write_atomic`); the page last, so a history that has its page is complete."""
    check_directory(out, "--out")
    for name in ("plots", "history.csv", "history.md", "history.html", "plots/history.png"):
        refuse_link(out / name, "--out")
    plot = history_plot(h, out / "plots")
    files = HistoryFiles(html=out / "history.html", markdown=out / "history.md", csv=out / "history.csv", plot=plot)
    write_csv(files.csv, h.frame())
    write_atomic(files.markdown, render_markdown(h, plot))
    write_atomic(files.html, render_html(h, plot))
    return files
