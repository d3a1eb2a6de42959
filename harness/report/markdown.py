"""``summary.md``: GitHub-flavoured Markdown for a CI job summary or a pull-request comment.

Short on purpose: the verdict, the complexity table, the correctness matrix, failures and
speedups. Strings from result files are escaped (``|`` would break a table; ``<`` and ``&``
would be read as HTML by GitHub).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from harness.report.html import fmt

if TYPE_CHECKING:
    from harness.report.builder import Report

ICON = {"pass": "✅", "fail": "❌", "error": "❌", "crash": "💥", "timeout": "⏱️", "skipped": "➖"}
MAX_FAILURES = 20
HEADLINE = "## Headline"


def md(value: Any) -> str:
    text = fmt(value)
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return text.replace("|", "\\|").replace("\r", " ").replace("\n", " ").replace("`", "\\`")


def md_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(md(h) for h in headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(md(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def render(report: Report) -> str:
    out = [f"# attnbench report `{md(report.name)}`", ""]
    if report.headline:
        out += [HEADLINE, *[f"- **{md(line.label)}:** {md(line.text)}" for line in report.headline], ""]
    problems = report.problem_count
    out.append(f"**Correctness:** {problems} problem cell(s)." if problems else
               ("**Correctness:** every verified cell passed." if not report.matrix.empty else
                "**Correctness:** no verify results."))
    from harness.report.tables import untrusted

    flagged = untrusted(report.results.bench)
    if not flagged.empty:
        out += ["", f"**Integrity:** {len(flagged)} bench cell(s) whose time is not backed by a verified computation "
                "(not plotted, never a speedup):", "",
                md_table(("implementation", "case", "mode", "status", "reason"),
                         [(r.implementation, r.case_id, r.mode, r.status, r.reason) for r in flagged.itertuples()])]
    if report.noise_note:
        out += ["", f"> {md(report.noise_note)}.", ""]
    runs = ", ".join(f"`{md(s.get('run_id'))}` ({md(s.get('command'))})" for s in report.sources)
    out += [f"Runs: {runs}", ""]
    out.append("## Complexity (fitted exponent vs theory)")
    if report.complexity.empty:
        out.append("No sweep with two or more sizes per implementation.")
    else:
        rows = [(r.implementation, r.quantity, r.axis, r.slope, r.theory,
                 "⚠️ off" if r.flagged else r.check, r.r2, r.n)
                for r in report.complexity.itertuples()]
        out.append(md_table(["implementation", "quantity", "in", "fitted", "theory", "check", "R²", "n"], rows))
        out.append(f"\nFlagged when off by more than {report.tolerance} (a tiled kernel's memory: only above). Sweeps: "
                   + "; ".join(sorted({f"{md(r.axis)}: {md(r.sweep)}" for r in report.complexity.itertuples()})))
    out.append("")
    if report.results.coverage:
        out.append("## Pairwise coverage (pairs of declared axis values the verify cases exercised)")
        out.append(md_table(["implementation", "pairs covered", "of", "%", "suite"],
                            [(name, c["covered"], c["total"], f"{100 * c['fraction']:.1f}", c.get("suite", ""))
                             for name, c in sorted(report.results.coverage.items())]))
        out.append("")
    if not report.matrix.empty:
        out.append("## Correctness matrix")
        matrix_rows: list[list[Any]] = []
        for impl in report.matrix.index:
            row: list[Any] = [impl]
            for group in report.matrix.columns:
                cell = report.matrix.at[impl, group]
                row.append(f"{ICON.get(cell['status'], '')} {cell['text']}" if isinstance(cell, dict) else "")
            matrix_rows.append(row)
        out += [md_table(["implementation", *report.matrix.columns], matrix_rows), ""]
        if not report.failures.empty:
            out.append("### Failing cases")
            shown = report.failures.head(MAX_FAILURES)
            out.append(md_table(list(shown.columns), shown.itertuples(index=False)))
            if len(report.failures) > MAX_FAILURES:
                out.append(f"\n… and {len(report.failures) - MAX_FAILURES} more (see index.html / verify.csv).")
            out.append("")
    if not report.speedup.empty:
        top = report.speedup[report.speedup["T"] == report.speedup["T"].max()].sort_values("speedup", ascending=False)
        out.append(f"## Speedup over {md(report.baseline)} at T={int(top['T'].iloc[0])}")
        out += [md_table(["implementation", "speedup (×)"], top[["implementation", "speedup"]].itertuples(index=False)), ""]
    out += _bandwidth_section(report)
    if report.plots:
        out.append("## Plots")
        out += [f"- [{md(p.title)}](plots/{p.path.name})" for p in report.plots]
    return "\n".join(out) + "\n"


def _bandwidth_section(report: Any) -> list[str]:
    """Decode steps (Tq < Tk): GB/s and % of the measured read bandwidth beside GFLOP/s and % of the GEMM peak."""
    bench = report.results.bench
    if bench.empty or "gbps" not in bench or not bench["gbps"].notna().any():
        return []
    rows = bench[(bench["status"] == "ok") & (bench["tq"] < bench["tk"]) & bench["gbps"].notna()]
    if rows.empty:
        return []
    rows = rows.sort_values(["case_id", "median"])

    def pct(x: Any) -> str:
        return "" if x is None or x != x else f"{float(x):.0f}%"

    out = ["## Decode steps against the memory roof",
           "GB/s counts the compulsory bytes (Q, K, V read once, O written once) per median call; % of the read "
           "bandwidth measured in the same run (torch.sum over 256 MiB).", ""]
    out.append(md_table(["case", "implementation", "median (ms)", "GB/s", "% of bandwidth", "GFLOP/s", "% of peak"],
                        [(r.case_id, r.implementation, f"{1e3 * float(r.median):.3g}", f"{float(r.gbps):.1f}",
                          pct(r.pct_bandwidth), f"{float(r.gflops):.1f}", pct(r.pct_peak))
                         for r in rows.itertuples()]))
    return out + [""]
