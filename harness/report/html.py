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

from harness.report import tables

if TYPE_CHECKING:
    from harness.report.builder import Report

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


def _headline(report: Report) -> str:
    if not report.headline:
        return ""
    items = "".join(f"<li><b>{esc(line.label)}:</b> {esc(line.text)}</li>" for line in report.headline)
    return f'<section id="headline"><h2>Headline</h2><ul>{items}</ul></section>'


def render(report: Report) -> str:
    """The whole page as a string."""
    parts = [f"<h1>attnbench report <small>{esc(report.name)}</small></h1>", _headline(report), _verdict(report),
             _sources(report)]
    parts.append("<h2>Complexity: fitted exponents against theory</h2>")
    if report.complexity.empty:
        parts.append("<p>No sweep with at least two sizes per implementation in these results.</p>")
    else:
        c = report.complexity
        rows = [(r.implementation, r.quantity, r.axis, r.slope, r.theory, r.off_by,
                 r.check, r.r2, r.n,
                 ", ".join(str(x) for x in r.excluded), r.sweep) for r in c.itertuples()]
        parts.append(table(["implementation", "quantity", "in", "fitted", "theory", "off by", "check", "R²", "n",
                            "left out (overhead)", "sweep"], rows,
                           row_classes=["flag" if r.flagged else "" for r in c.itertuples()],
                           numeric=[3, 4, 5, 7, 8]))
        parts.append(f"<p><small>Flagged when the fitted exponent is off by more than {report.tolerance} from "
                     "theory (time: 2 in T, 1 in d, 1 in heads; memory: 2 in T when the T×T matrix is "
                     "materialised, 1 when tiled: an upper bound, so only a tiled kernel whose memory grows faster "
                     "than T is flagged), when at least 3 sizes were fitted.</small></p>")
    parts.append("<h2>Plots</h2>")
    for plot in report.plots:
        parts.append(f"<figure id=\"{esc(plot.name)}\"><h3>{esc(plot.title)}</h3>{image(plot.path, plot.title)}"
                     f"<figcaption>{esc(plot.caption)}</figcaption></figure>")
    if not report.plots:
        parts.append("<p>No plots: the results hold no bench or verify cells.</p>")
    if not report.matrix.empty:
        parts.append("<h2>Correctness</h2>" + matrix_table(report.matrix))
        if report.results.coverage:
            coverage = "".join(f"<tr><td>{esc(name)}</td><td>{c['covered']} of {c['total']}</td>"
                           f"<td>{100 * c['fraction']:.1f}%</td><td>{esc(c.get('suite', ''))}</td></tr>"
                           for name, c in sorted(report.results.coverage.items()))
            parts.append("<h3>Pairwise coverage</h3><p><small>Of every pair of values of two declared axes (dtype, "
                         "scale, causal, mask kind and rank, GQA ratio, Tq, Tk, d, inputs, layout, grad, batch), "
                         "how many the verify cases exercised together.</small></p><table><tr><th>implementation"
                         f"</th><th>pairs</th><th>covered</th><th>suite</th></tr>{coverage}</table>")
        if not report.failures.empty:
            parts.append("<h3>Failing cases</h3>" + frame_table(report.failures, ["ratio", "max_abs_err", "rel_l2"]))
    if not report.speedup.empty:
        pivot = report.speedup.pivot(index="implementation", columns="T", values="speedup").reset_index()
        pivot.columns = [str(c) if c == "implementation" else f"T={c}" for c in pivot.columns]
        parts.append(f"<h2>Speedup over {esc(report.baseline)}</h2>"
                     + frame_table(pivot, [c for c in pivot.columns if c != "implementation"]))
    flagged = tables.untrusted(report.results.bench)
    if not flagged.empty:
        parts.append("<h2>Bench cells whose time is not backed by a verified computation</h2>"
                     "<p><small>Not plotted, never a speedup (docs/integrity.md says what each status means).</small></p>"
                     + table(list(flagged.columns), flagged.itertuples(index=False),
                             row_classes=list(flagged["status"]), numeric=[4]))
    if not report.bench_table.empty:
        parts.append(f"<h2>All bench cells</h2><details><summary>{len(report.bench_table)} cells</summary>"
                     + frame_table(report.bench_table, ["median", "iqr_over_median", "n", "gflops", "pct_peak",
                                                        "gbps", "pct_bandwidth", "peak_extra_bytes", "peak_bytes"])
                     + "</details>")
    body = "\n".join(parts)
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>attnbench report {esc(report.name)}</title><style>{CSS}</style></head>\n"
            f"<body>\n{body}\n</body></html>\n")


def _verdict(report: Report) -> str:
    problems = report.problem_count
    flagged = int(report.complexity["flagged"].sum()) if not report.complexity.empty else 0
    if problems:
        text = f"{problems} verify cell(s) failed, errored, crashed or timed out"
    else:
        text = "every verified cell passed" if not report.matrix.empty else "no verify results in these files"
    if flagged:
        text += f"; {flagged} fitted exponent(s) off theory"
    note = f"<p><small>{esc(report.noise_note)}.</small></p>" if report.noise_note else ""
    untrusted = len(tables.untrusted(report.results.bench))
    if untrusted:
        text += f"; {untrusted} bench cell(s) failed the integrity checks (implausible, violation or wrong)"
    return f'<p class="verdict {"bad" if problems or untrusted else "ok"}">{esc(text)}.</p>{note}'


def _sources(report: Report) -> str:
    rows = []
    for s in report.sources:
        env = s.get("environment") or {}
        rows.append((s.get("run_id"), s.get("command"), "yes" if s.get("complete") else "NO (interrupted)",
                     env.get("cpu_model"), env.get("threads"), env.get("torch"), env.get("git_commit"), env.get("time")))
    return "<h2>Runs</h2>" + table(["run", "command", "complete", "CPU", "threads", "torch", "commit", "time"], rows)
