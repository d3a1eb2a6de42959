"""How a comparison of two stored runs reads: its table rows and its Markdown (:mod:`harness.report.compare`
decides; nothing is computed here). ``attnbench compare`` prints these."""

from __future__ import annotations

from collections.abc import Sequence

from harness.analysis.comparison import interval_words, level_note
from harness.report.compare import NOT_COMPARABLE, ONLY_BASE, ONLY_NEW, CellComparison, Comparison


def _fmt_time(seconds: float | None) -> str:
    if seconds is None:
        return ""
    return f"{seconds * 1e3:.3g} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.3g} µs"


def _noise(c: CellComparison) -> str:
    parts = [f"{c.base_noise:.0%}/{c.new_noise:.0%}" if c.base_noise is not None and c.new_noise is not None else ""]
    if c.clock == "cpu":
        parts.append("CPU clock")
    else:
        loads = [x for x in (c.base_load, c.new_load) if x is not None]
        if loads:
            parts.append(f"load {max(loads):.1f}")
    return ", ".join(p for p in parts if p)


def rows(cells: Sequence[CellComparison]) -> list[tuple[str, ...]]:
    return [(c.implementation, c.case_id, c.mode, _fmt_time(c.base_median), _fmt_time(c.new_median),
             f"{c.ratio:.3f}x" if c.ratio is not None else "",
             f"[{c.low:.3f}, {c.high:.3f}]" if c.low is not None and c.high is not None else "",
             f"{c.mde:.3f}x" if c.mde is not None else ("none" if c.ratio is not None else ""),
             c.verdict, _noise(c), c.note) for c in cells]


HEADERS = ("implementation", "case", "mode", "base", "new", "new/base", interval_words(), "MDE", "verdict",
           "IQR base/new", "note")
RECOMMEND = ("Two separate runs cannot decide these cells: their own noise or load could explain the ratio. "
             "Time both revisions together, in interleaved rounds: `attnbench ab BASE_PLUGIN HEAD_PLUGIN`.")
SECTIONS = (("Slower", "slower"), ("Newly failing (measured in BASE)", "newly_failing"),
            ("Undecided (the noise decides neither way)", "undecided"), ("Faster", "faster"))


def summary(result: Comparison) -> str:
    t = f"{result.threshold:.0%}"
    failing = f", {len(result.newly_failing)} newly failing" if result.newly_failing else ""
    return (f"{result.compared} cells compared: {len(result.slower)} slower, {len(result.faster)} faster beyond {t}, "
            f"{len(result.with_verdict('unchanged'))} unchanged, {len(result.undecided)} undecided{failing}.")


def markdown(result: Comparison) -> str:
    """GitHub-flavoured Markdown: the verdict, then slower, newly failing, undecided and faster cells."""
    from harness.report.markdown import md, md_table  # pandas (the report's tables): only when Markdown is asked for

    t = f"{result.threshold:.0%}"
    lines = ["# attnbench compare", "", f"Base `{result.base}` vs new `{result.new}`, threshold {t}.", "",
             f"**{summary(result)}**"]
    if result.undecided and any(c.method == "separate runs" for c in result.undecided):
        lines.append(RECOMMEND)
    if result.newly_failing:
        lines.append(f"**{len(result.newly_failing)} cell(s) measured in the base run now fail.**")
    lines += [f"> warning: {md(w)}" for w in result.warnings]  # the machines' names come from the files
    for title, attr in SECTIONS:
        cells = getattr(result, attr)
        if cells:
            lines += ["", f"## {title}", md_table(HEADERS, rows(cells))]
    missing = [c for c in result.cells if c.verdict in (ONLY_BASE, ONLY_NEW)  # not comparable alike in both: nothing to say
               or (c.verdict == NOT_COMPARABLE and (c.base_status != c.new_status or c.note.startswith("measured on")))]
    if missing:
        lines += ["", "## Not compared", md_table(("implementation", "case", "mode", "why"),
                                                  [(c.implementation, c.case_id, c.mode, c.note or c.verdict)
                                                   for c in missing])]
    lines += ["", level_note(result.alpha, result.compared)]
    return "\n".join(lines) + "\n"
