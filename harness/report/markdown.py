"""``summary.md``: GitHub-flavoured Markdown for a CI job summary or a pull-request comment.

Short on purpose: the verdict, the complexity table, the correctness matrix, failures and
speedups. A result file is untrusted, and this file is posted where people read it (a CI job
summary, a pull-request comment), so every string from a result file passes through :func:`md`:
``|`` would break a table; ``<`` and ``&`` would be read as HTML; ``](`` would close a link or an
image (its ``]`` is escaped; a ``[1, 2]`` stays as it reads, and with no line of its own a string can
define no reference); backslashes and backquotes are escaped, so no escape is undone; ``@name`` would notify a user and
``http://`` or ``www.`` would become a link (a zero-width space after ``@``, ``:`` and ``www``
keeps the text as it reads but stops GitHub turning it into a mention or a link).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from harness.analysis.values import LABELS, VALUES_RULE
from harness.errors import printable
from harness.report import trust
from harness.report.html import fmt

if TYPE_CHECKING:
    from harness.report.findings import Analysis
    from harness.report.plots import Plot

ICON = {"pass": "✅", "fail": "❌", "error": "❌", "crash": "💥", "timeout": "⏱️", "skipped": "➖"}
MAX_FAILURES = 20
HEADLINE = "## Headline"


_ZWSP = "\u200b"
_MARKUP = str.maketrans({c: "\\" + c for c in "\\`|"})


def md(value: Any) -> str:
    """``value`` as inert Markdown text: no HTML, link, image or mention comes out of it."""
    text = printable(fmt(value).replace("\r\n", " ").replace("\n", " "))  # no control character reaches a reader
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").translate(_MARKUP)
    text = text.replace("](", "\\](").replace("][", "\\][")  # no [text](url), ![alt](src) nor [text][ref]
    return text.replace("@", "@" + _ZWSP).replace("://", ":" + _ZWSP + "//").replace("www.", "www" + _ZWSP + ".")


def md_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(md(h) for h in headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(md(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def render(report: Analysis, name: str, plots: Sequence[Plot]) -> str:
    """summary.md of the analysis ``report``, titled ``name``, linking ``plots``: its sections in order."""
    out = [f"# attnbench report `{md(name)}`", ""]
    for section in (_headline, _set_aside, _verdicts, _values, _runs, _complexity, _coverage, _correctness, _speedup, _bandwidth_section,
                    _serving_section):
        out += section(report)
    if plots:
        out.append("## Plots")
        out += [f"- [{md(p.title)}](plots/{p.path.name})" for p in plots]
    return "\n".join(out) + "\n"


def _headline(report: Analysis) -> list[str]:
    if not report.headline:
        return []
    return [HEADLINE, *[f"- **{md(line.label)}:** {md(line.text)}"
                        + (f" ([listed below](#{line.anchor if line.anchor != trust.ANCHOR else trust.MD_ANCHOR}))"
                           if line.anchor else "") for line in report.headline], ""]


MAX_SET_ASIDE = 30


def _set_aside(report: Analysis) -> list[str]:
    """Every bench cell left out of the rankings and speedups, or counted but flagged, with why (the first
    :data:`MAX_SET_ASIDE`; index.html lists them all)."""
    aside = report.set_aside
    if aside.empty:
        return []
    shown = aside.head(MAX_SET_ASIDE)
    out = [f"## {trust.TITLE}", "No headline, \"fastest\" or speedup reads a cell left out (counted: no); a flagged "
           "cell counts, with the reason beside it.", "",
           md_table(("implementation", "case", "mode", "status", "counted", "why"),
                    [(r.implementation, r.case_id, r.mode, r.status, r.counted, r.why) for r in shown.itertuples()])]
    if len(aside) > MAX_SET_ASIDE:
        out.append(f"\n… and {len(aside) - MAX_SET_ASIDE} more (see index.html / bench.csv).")
    return out + [""]


def _verdicts(report: Analysis) -> list[str]:
    """Correctness in one line, then the noise note (the cells set aside are listed above, :func:`_set_aside`)."""
    problems = report.problem_count
    out = [f"**Correctness:** {problems} problem cell(s)." if problems else
           ("**Correctness:** every verified cell passed." if not report.matrix.empty else
            "**Correctness:** no verify results.")]
    if report.noise.note:
        out += ["", f"> {md(report.noise.note)}.", ""]
    return out


def _values(report: Analysis) -> list[str]:
    """The value probe's finding (docs/benchmarking.md, "Values"): each cell whose time depends on its input values,
    or that none did; nothing when no cell was probed (an older file, ``--value-probe off``)."""
    values = report.values
    if not values.note:
        return []
    out = ["## Values", VALUES_RULE, ""]
    if values.findings:
        out += [md_table(("implementation", "case", "mode", "distribution", "time / normal", "interval"),
                         [(f.implementation, f.case_id, f.mode, LABELS.get(s.distribution, s.distribution),
                           f"{s.ratio:.2f}x", f"[{s.low:.2f}, {s.high:.2f}]") for f in values.findings for s in f.shifts]),
                f"\n{md(values.summary)}.", ""]
    else:
        out += [f"{md(values.note)}.", ""]
    return out


def _runs(report: Analysis) -> list[str]:
    runs = ", ".join(f"`{md(s.run_id)}` ({md(s.command)})" for s in report.results.sources)
    return [f"Runs: {runs}", ""]


def _coverage(report: Analysis) -> list[str]:
    if not report.results.coverage:
        return []
    return ["## Pairwise coverage (pairs of declared axis values the verify cases exercised)",
            md_table(["implementation", "pairs covered", "of", "%", "suite"],
                     [(name, c.covered, c.total, f"{100 * c.fraction:.1f}", c.suite or "")
                      for name, c in sorted(report.results.coverage.items())]), ""]


def _correctness(report: Analysis) -> list[str]:
    """The matrix (implementation x group), the conventions its verdicts assume, and the failing cases."""
    if report.matrix.empty:
        return []
    matrix = report.matrix
    rows = [[impl, *(f"{ICON.get(cell['status'], '')} {cell['text']}" if isinstance(cell, dict) else ""
                     for cell in (matrix.at[impl, group] for group in matrix.columns))] for impl in matrix.index]
    out = ["## Correctness matrix", md_table(["implementation", *matrix.columns], rows), ""]
    notes = declared_conventions(report.results.implementations)
    if notes:
        out.append("### Declared conventions (the verdicts above assume them)")
        out += [f"- {md(name)}: {note}" for name, note in notes] + [""]
    if not report.failures.empty:
        shown = report.failures.head(MAX_FAILURES)
        out += ["### Failing cases", md_table(list(shown.columns), shown.itertuples(index=False))]
        if len(report.failures) > MAX_FAILURES:
            out.append(f"\n… and {len(report.failures) - MAX_FAILURES} more (see index.html / verify.csv).")
        out.append("")
    return out


def _speedup(report: Analysis) -> list[str]:
    if report.speedup.empty:
        return []
    top = report.speedup[report.speedup["T"] == report.speedup["T"].max()].sort_values("speedup", ascending=False)
    return [f"## Speedup over {md(report.baseline)} at T={int(top['T'].iloc[0])}",
            md_table(["implementation", "speedup (×)"], top[["implementation", "speedup"]].itertuples(index=False)), ""]


def _complexity(report: Analysis) -> list[str]:
    """The fitted leading exponents against theory, each with its interval and where its term dominates."""
    out = ["## Complexity (fitted cost model: leading exponent vs theory)"]
    rows = report.rows
    if not rows:
        return out + ["No sweep with two or more sizes per implementation.", ""]
    out.append(md_table(["implementation", "quantity", "in", "exponent", "interval", "theory", "check",
                         "leading term dominates at", "n"],
                        [(r.implementation, r.quantity, r.axis, r.slope,
                          "" if r.fit is None else f"[{r.fit.low:.2f}, {r.fit.high:.2f}]", r.theory,
                          "⚠️ off" if r.flagged else r.check, r.dominates, r.n) for r in rows]))
    out.append(f"\n{len(report.flagged)} exponent(s) flagged. Time is flagged only for growth at least half a power "
               "beyond theory, sustained over two steps, that the noise cannot explain (relative to the reference timed "
               "beside it in interleaved "
               "rounds where bench paired them, else the exponent's interval: bootstrap over the raw samples and the "
               "run's scatter between cells); a smaller excess is a departure (where the per-FLOP rate falls), an "
               "interval holding theory and its neighbour is undecided. Memory is flagged when theory lies outside "
               "the interval and the leading term is most of the fitted cost at two sizes or more (a tiled kernel's "
               "O(T) memory: only above). Sweeps: " + "; ".join(sorted({f"{md(r.axis)}: {md(r.sweep)}" for r in rows})))
    return out + [""]


def _bandwidth_section(report: Analysis) -> list[str]:
    """Decode steps (Tq < Tk): GB/s and % of the measured read bandwidth beside GFLOP/s and % of the GEMM peak."""
    bench = report.results.bench
    if bench.empty or "gbps" not in bench or not bench["gbps"].notna().any():
        return []
    rows = bench[trust.counted(bench) & (bench["tq"] < bench["tk"]) & bench["gbps"].notna()]  # left out: listed above
    if rows.empty:
        return []
    rows = rows.sort_values(["case_id", "median"])

    def pct(x: Any, row: Any) -> str:
        if x is None or x != x:
            return ""
        return f"{float(x):.0f}%" + (trust.ROOF_MARK if float(x) > 100.0 and trust.above_roof(row) else "")

    out = ["## Decode steps against the memory roof",
           "GB/s counts the compulsory bytes (Q, K, V read once, O written once) per median call; % of the read "
           "bandwidth measured in the same run (torch.sum over 256 MiB).", ""]
    out.append(md_table(["case", "implementation", "median (ms)", "GB/s", "% of bandwidth", "GFLOP/s", "% of peak"],
                        [(r.case_id, r.implementation, f"{1e3 * float(r.median):.3g}", f"{float(r.gbps):.1f}",
                          pct(r.pct_bandwidth, r._asdict()), f"{float(r.gflops):.1f}", pct(r.pct_peak, r._asdict()))
                         for r in rows.itertuples()]))
    notes = sorted({n for n in (trust.above_roof(r) for r in rows.to_dict("records")) if n is not None})
    if notes:
        out += ["", f"{md(trust.ROOF_FOOTNOTE)}: " + "; ".join(md(n) for n in notes) + "."]
    return out + [""]


def _serving_section(report: Analysis) -> list[str]:
    """Serving batches (``--workload``): new tokens per second, and GB/s against the read bandwidth, per batch."""
    bench = report.results.bench
    if bench.empty or "serving" not in bench or not bench["serving"].notna().any():
        return []
    rows = bench[trust.counted(bench) & bench["serving"].notna()].sort_values(["case_id", "median"])
    if rows.empty:
        return []
    out = ["## Serving batches",
           "Each batch is one call (docs/serving.md); tokens/s are its new tokens (Tq) per median call; GB/s its "
           "compulsory bytes (each request's keys read once) against the read bandwidth measured in the same run. A "
           "batch of one kind of request gives that kind's rate.", ""]
    out.append(md_table(["batch", "new tokens / keys", "implementation", "median (ms)", "tokens/s", "GB/s",
                         "% of bandwidth"],
                        [(r.serving, f"{int(r.tq)} / {int(r.tk)}", r.implementation, f"{1e3 * float(r.median):.3g}",
                          f"{float(r.tq) / float(r.median):,.0f}", "" if r.gbps != r.gbps else f"{float(r.gbps):.1f}",
                          "" if r.pct_bandwidth is None or r.pct_bandwidth != r.pct_bandwidth
                          else f"{float(r.pct_bandwidth):.0f}%")
                         for r in rows.itertuples()]))
    return out + [""]


def declared_conventions(implementations: Mapping[str, Mapping[str, object]]) -> list[tuple[str, str]]:
    """(implementation, plain sentence) for each unusual convention a result file records (its capabilities'
    ``conventions``); a record this attnbench cannot read is left out, not guessed at."""
    from harness.contract.conventions import Conventions
    from harness.errors import PluginError

    notes = []
    for name, info in sorted(implementations.items()):
        declared = info.get("conventions") if isinstance(info, Mapping) else None
        if not isinstance(declared, Mapping):
            continue
        try:
            conventions = Conventions(**{k: v for k, v in declared.items() if k in Conventions.__dataclass_fields__})
        except (PluginError, TypeError):
            continue
        notes += [(name, note) for note in conventions.unusual()]
    return notes
