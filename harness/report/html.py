"""``index.html``: one self-contained page (images inline as base64, inline CSS, no script, no network).

Every string that comes from a result file or a plugin (names, case ids, reasons, environment)
passes through :func:`esc`, so a plugin called ``<script>`` shows as text. The page has no
JavaScript at all: nothing to fail in a browser and nothing to trust.
"""

from __future__ import annotations

import base64
import html
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from harness.analysis.growth import Row, model_text
from harness.analysis.values import LABELS, VALUES_RULE
from harness.report import tables, trust

if TYPE_CHECKING:
    from harness.report.findings import Analysis
    from harness.report.plots import Plot

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2em auto;max-width:1150px;
 padding:0 1em;color:#1d1d1f;line-height:1.4}
h1{font-size:1.6em}h2{margin-top:1.8em;border-bottom:1px solid #ddd;padding-bottom:.2em}
table{border-collapse:collapse;margin:.6em 0;font-size:.88em}
th,td{border:1px solid #d0d0d0;padding:.25em .55em;text-align:left;vertical-align:top}
th{background:#f3f3f3}td.num{text-align:right;font-variant-numeric:tabular-nums}
tr.flag td{background:#fff1ef}.pass{background:#e3f4e8}.fail,.error{background:#fbe0de}
.implausible,.violation,.wrong{background:#f8c9c4}.crash{background:#f1e0f5}.timeout{background:#fdf0dc}.skipped{background:#f2f2f2;color:#666}
figure{margin:1.2em 0}figure img{max-width:100%;border:1px solid #eee}figcaption{font-size:.85em;color:#555}
.verdict{padding:.6em 1em;border-radius:4px}.ok{background:#e3f4e8}.bad{background:#fbe0de}
code{background:#f5f5f5;padding:0 .2em}small{color:#666}
"""


def esc(value: Any) -> str:
    """HTML-escape anything, quotes included (for text and attribute values alike)."""
    return html.escape("" if value is None else str(value), quote=True)


def fmt(value: Any, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]], row_classes: Iterable[str] | None = None,
          numeric: Sequence[int] = ()) -> str:
    """An escaped HTML table; ``numeric`` lists the columns to right-align."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = []
    classes = list(row_classes) if row_classes is not None else None
    for i, row in enumerate(rows):
        cls = f' class="{esc(classes[i])}"' if classes and classes[i] else ""
        cells = "".join(f'<td class="num">{esc(fmt(c))}</td>' if j in numeric else f"<td>{esc(fmt(c))}</td>"
                        for j, c in enumerate(row))
        body.append(f"<tr{cls}>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def frame_table(frame: pd.DataFrame, numeric: Sequence[str] = ()) -> str:
    cols = list(frame.columns)
    return table(cols, frame.itertuples(index=False), numeric=[cols.index(c) for c in numeric if c in cols])


def matrix_table(matrix: pd.DataFrame) -> str:
    head = "<th>implementation</th>" + "".join(f"<th>{esc(g)}</th>" for g in matrix.columns)
    rows = []
    for impl in matrix.index:
        cells = []
        for group in matrix.columns:
            cell = matrix.at[impl, group]
            if not isinstance(cell, dict):
                cells.append("<td></td>")
                continue
            text = "<br>".join(esc(part) for part in cell["text"].split("\n"))
            cells.append(f'<td class="{esc(cell["status"])}">{text}</td>')
        rows.append(f"<tr><th>{esc(impl)}</th>{''.join(cells)}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def image(path: Path, alt: str) -> str:
    """The PNG inline as a data: URI, so the page needs no file beside it."""
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f'<img src="data:image/png;base64,{data}" alt="{esc(alt)}">'


def _headline(report: Analysis) -> str:
    if not report.headline:
        return ""
    items = "".join(f"<li><b>{esc(line.label)}:</b> {esc(line.text)}"
                    + (f' (<a href="#{esc(line.anchor)}">listed below</a>)' if line.anchor else "") + "</li>"
                    for line in report.headline)
    return f'<section id="headline"><h2>Headline</h2><ul>{items}</ul></section>'


def render(report: Analysis, name: str, plots: Sequence[Plot]) -> str:
    """The whole page for the analysis ``report``, titled ``name``, with ``plots`` inline."""
    parts = [f"<h1>attnbench report <small>{esc(name)}</small></h1>", _headline(report), _verdict(report),
             _values(report), _set_aside(report), _sources(report), _complexity(report)]
    parts.append("<h2>Plots</h2>")
    for plot in plots:
        parts.append(f"<figure id=\"{esc(plot.name)}\"><h3>{esc(plot.title)}</h3>{image(plot.path, plot.title)}"
                     f"<figcaption>{esc(plot.caption)}</figcaption></figure>")
    if not plots:
        parts.append("<p>No plots: the results hold no bench or verify cells.</p>")
    if not report.matrix.empty:
        parts.append("<h2>Correctness</h2>" + matrix_table(report.matrix))
        if report.results.coverage:
            coverage = "".join(f"<tr><td>{esc(name)}</td><td>{esc(c.covered)} of {esc(c.total)}</td>"
                           f"<td>{100 * c.fraction:.1f}%</td><td>{esc(c.suite or '')}</td></tr>"
                           for name, c in sorted(report.results.coverage.items()))
            parts.append("<h3>Pairwise coverage</h3><p><small>Of every pair of values of two declared axes (dtype, "
                         "scale, causal, mask kind and rank, GQA ratio, Tq, Tk, d, inputs, layout, grad, batch), "
                         "how many the verify cases exercised together.</small></p><table><tr><th>implementation"
                         f"</th><th>pairs</th><th>covered</th><th>suite</th></tr>{coverage}</table>")
        if not report.failures.empty:
            parts.append("<h3>Failing cases</h3>" + frame_table(report.failures, ["margin", "ratio", "max_abs_err",
                                                                                   "rel_l2"]))
    if not report.speedup.empty:
        pivot = report.speedup.pivot(index="implementation", columns="T", values="speedup").reset_index()
        pivot.columns = [str(c) if c == "implementation" else f"T={c}" for c in pivot.columns]
        parts.append(f"<h2>Speedup over {esc(report.baseline)}</h2>"
                     + frame_table(pivot, [c for c in pivot.columns if c != "implementation"]))
    if not report.bench_table.empty:
        parts.append(f"<h2>All bench cells</h2><details><summary>{len(report.bench_table)} cells</summary>"
                     + _roof_footnote(report.bench_table)
                     + frame_table(tables.marked(report.bench_table), ["median", "iqr_over_median", "n", "gflops", "pct_peak",
                                                        "gbps", "pct_bandwidth", "peak_extra_bytes", "peak_bytes",
                                                        "ratio_to_ref", "ratio_low", "ratio_high", "pct_peak_beside",
                                                        "pct_bandwidth_beside"])
                     + "</details>")
    body = "\n".join(parts)
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>attnbench report {esc(name)}</title><style>{CSS}</style></head>\n"
            f"<body>\n{body}\n</body></html>\n")


def _set_aside(report: Analysis) -> str:
    """Every bench cell left out of the rankings and speedups, or counted but flagged, once, with why."""
    aside = report.set_aside
    if aside.empty:
        return ""
    aside = aside[list(trust.SET_ASIDE_COLUMNS)]
    return (f'<section id="{trust.ANCHOR}"><h2>{esc(trust.TITLE)}</h2><p><small>No headline, "fastest" or speedup '
            "reads a cell left out (counted: no); a flagged cell counts, with the reason beside it "
            "(docs/reports.md, docs/integrity.md).</small></p>"
            + table(list(aside.columns), aside.itertuples(index=False), row_classes=list(aside["status"]))
            + "</section>")


def _roof_footnote(frame: pd.DataFrame) -> str:
    if "above_roof" not in frame or not frame["above_roof"].notna().any():
        return ""
    return f"<p><small>{esc(trust.ROOF_FOOTNOTE)} (column above_roof).</small></p>"


def _complexity(report: Analysis) -> str:
    """The complexity table: per fit its leading exponent and interval, theory, and each size's regime."""
    head = "<h2>Complexity: fitted cost models against theory</h2>"
    rows = report.rows
    if not rows:
        return head + "<p>No sweep with at least two sizes per implementation in these results.</p>"
    body = [(r.implementation, r.quantity, r.axis, r.slope,
             "" if r.fit is None else f"[{r.fit.low:.2f},\u00a0{r.fit.high:.2f}]", r.theory, r.check, r.dominates,
             "" if r.fit is None else _regimes(r), "" if r.fit is None else model_text(r.fit), r.r2) for r in rows]
    sweeps = "; ".join(sorted({f"{r.quantity} in {r.axis}: {r.sweep}" for r in rows}))
    return head + table(["implementation", "quantity", "in", "exponent", "interval", "theory", "check",
                         "leading term dominates at", "regimes", "model (x: the size)", "R² (log)"],
                        body, row_classes=["flag" if r.flagged else "" for r in rows], numeric=[3, 5, 10]) + (
        f"<p><small>Sweeps: {esc(sweeps)}.</small></p>"
        f"<p><small>{esc(COMPLEXITY_NOTE)}</small></p>")


COMPLEXITY_NOTE = (
    "Each sweep is fitted with a cost model: the lower-order terms the algorithm has (a constant, and for an "
    "O(T²) cost a term in T: fixed per-call costs, per-row work, the softmax's O(T²) that is constant along d) "
    "plus one leading power term c·x^p, all coefficients non-negative. The interval for p is a 95% bootstrap "
    "over the raw samples, with the run's scatter between cells on top (its cells' spread around their own cost "
    "models: the load changing from one cell to the next), joined with the estimates that leave out one size, "
    "at least ±0.1 wide. Each size is in the regime of the term that is most of its fitted cost (lead: the "
    "leading term). Time (theory 2 in T, 1 in d, heads and Tk) is flagged only for growth at least half a power "
    "beyond theory, sustained over two steps, that the noise cannot explain: relative to the reference timed "
    "beside it in interleaved rounds "
    "where bench paired them (load cancels in each round's ratio), else the interval above theory; a smaller "
    "excess is a departure, named by where the per-FLOP rate falls most; an interval holding theory and theory "
    "+ 1 is undecided. Memory (2 in T when the T×T matrix is materialised, 1 when tiled, a bound, so only growth "
    "above it) is flagged when theory lies outside the interval and the leading term dominates at two sizes or "
    "more; where it dominates nowhere the check says \"leading "
    "term not reached\": these sizes cannot test the exponent. A time sweep whose time falls by more than 10% "
    "from one size to a larger one (more work in less time: the load changed between its cells) is not judged.")


def _regimes(row: Row) -> str:
    """Runs of sizes in one regime: ``128–256 fixed, 512–2048 lead``."""
    assert row.fit is not None
    runs: list[list[Any]] = []
    for x, regime in zip(row.fit.xs, row.fit.regimes):
        if runs and runs[-1][2] == regime:
            runs[-1][1] = x
        else:
            runs.append([x, x, regime])
    return ", ".join(f"{_size(a)}{'' if a == b else '–' + _size(b)} {regime}" for a, b, regime in runs)


def _size(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def _verdict(report: Analysis) -> str:
    problems = report.problem_count
    flagged = len(report.flagged)
    if problems:
        text = f"{problems} verify cell(s) failed, errored, crashed or timed out"
    else:
        text = "every verified cell passed" if not report.matrix.empty else "no verify results in these files"
    if flagged:
        text += f"; {flagged} fitted exponent(s) off theory"
    note = f"<p><small>{esc(report.noise.note)}.</small></p>" if report.noise.note else ""
    untrusted = len(report.untrusted)
    if untrusted:
        text += f"; {untrusted} bench cell(s) failed the integrity checks (implausible, violation or wrong)"
    return f'<p class="verdict {"bad" if problems or untrusted else "ok"}">{esc(text)}.</p>{note}'


def _values(report: Analysis) -> str:
    """The value probe's finding: each cell whose time depends on its input values, or that none did (nothing when
    no cell was probed)."""
    values = report.values
    if not values.note:
        return ""
    if not values.findings:
        return f'<section id="values"><h2>Values</h2><p>{esc(values.note)}.</p><p><small>{esc(VALUES_RULE)}</small></p></section>'
    rows = [(f.implementation, f.case_id, f.mode, LABELS.get(s.distribution, s.distribution), f"{s.ratio:.2f}x",
             f"[{s.low:.2f}, {s.high:.2f}]") for f in values.findings for s in f.shifts]
    return ('<section id="values"><h2>Values</h2>'
            + f"<p>{esc(values.summary)}.</p>"
            + table(["implementation", "case", "mode", "distribution", "time / normal", "interval"], rows)
            + f"<p><small>{esc(VALUES_RULE)}</small></p></section>")


def _sources(report: Analysis) -> str:
    rows = []
    for s in report.results.sources:
        env = s.environment
        rows.append((s.run_id, s.command, "yes" if s.complete else "NO (interrupted)",
                     env.cpu_model, env.threads, env.torch, env.git_commit, env.time))
    return "<h2>Runs</h2>" + table(["run", "command", "complete", "CPU", "threads", "torch", "commit", "time"], rows)
