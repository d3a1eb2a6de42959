"""How a comparison of two stored runs reads: its table rows and its Markdown (:mod:`harness.report.compare`
decides; nothing is computed here). ``attnbench compare`` prints these."""

from __future__ import annotations

from collections.abc import Sequence

from harness.report.compare import NOT_COMPARABLE, ONLY_BASE, ONLY_NEW, CellComparison, Comparison


def _fmt_time(seconds: float | None) -> str:
    if seconds is None:
        return ""
    return f"{seconds * 1e3:.3g} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.3g} µs"


def _noise(c: CellComparison) -> str:
    parts = [f"{c.base_noise:.0%}/{c.new_noise:.0%}" if c.base_noise is not None and c.new_noise is not None else ""]
    loads = [x for x in (c.base_load, c.new_load) if x is not None]
    if loads:
        parts.append(f"load {max(loads):.1f}")
    return ", ".join(p for p in parts if p)


def rows(cells: Sequence[CellComparison]) -> list[tuple[str, ...]]:
    return [(c.implementation, c.case_id, c.mode, _fmt_time(c.base_median), _fmt_time(c.new_median),
             f"{c.ratio:.2f}x" if c.ratio is not None else "", "" if c.p_value is None else f"{c.p_value:.2g}",
             _noise(c), c.note) for c in cells]


HEADERS = ("implementation", "case", "mode", "base", "new", "new/base", "p (rounds)", "IQR base/new", "note")
RECOMMEND = ("Two separate runs cannot decide these cells: their own noise or load could explain the ratio. "
             "Time both revisions together, in interleaved rounds: `attnbench ab BASE_PLUGIN HEAD_PLUGIN`.")


def markdown(result: Comparison) -> str:
    """GitHub-flavoured Markdown: the verdict, then regressions, undecided cells and improvements."""
    from harness.report.markdown import md, md_table  # pandas (the report's tables): only when Markdown is asked for

    t = f"{result.threshold:.0%}"
    regs, imps, undecided = result.regressions, result.improvements, result.undecided
    compared = sum(c.ratio is not None for c in result.cells)
    header = (f"Base `{result.base}` vs new `{result.new}`: {compared} cells compared, threshold {t}; a separate "
              f"run's cell is decided only beyond its noise and load, rounds by Mann-Whitney U p<{result.alpha}.")
    lines = ["# attnbench compare", "", header, ""]
    lines.append(f"**{len(regs)} regression(s) beyond {t}.**" if regs else f"**No regression beyond {t} found.**")
    if undecided:
        lines.append(f"**{len(undecided)} cell(s) not comparable: the runs' noise or load cannot decide them.** "
                     + RECOMMEND)
    if result.newly_failing:
        lines.append(f"**{len(result.newly_failing)} cell(s) measured in the base run now fail.**")
    lines += [f"> warning: {md(w)}" for w in result.warnings]  # the machines' names come from the files
    for title, cells in (("Regressions", regs), ("Newly failing", result.newly_failing),
                         ("Not comparable (noise or load)", undecided), ("Improvements", imps)):
        if cells:
            lines += ["", f"## {title}", md_table(HEADERS, rows(cells))]
    missing = [c for c in result.cells if c.verdict in (ONLY_BASE, ONLY_NEW)  # not comparable alike in both: nothing to say
               or (c.verdict == NOT_COMPARABLE and (c.base_status != c.new_status or c.note.startswith("measured on")))]
    if missing:
        lines += ["", "## Not compared", md_table(("implementation", "case", "mode", "why"),
                                                  [(c.implementation, c.case_id, c.mode, c.note or c.verdict)
                                                   for c in missing])]
    return "\n".join(lines) + "\n"
