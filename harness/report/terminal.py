"""Plain-text tables for a terminal: what `attnbench bench` and `verify` print after a run.

Text presentation of typed runs, like the HTML and Markdown writers beside it; the commands
print these and add only their own warnings.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.analysis.growth import Row, without_short_fit
from harness.analysis.margins import baseline_led, margin
from harness.analysis.stats import is_noisy
from harness.errors import printable
from harness.results import BenchCell, Run, Status, VerifyCell


def format_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A plain-text table with columns padded to their widest cell, every cell :func:`~harness.errors.printable`."""
    cells = [[printable(h) for h in headers]] + [[printable(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def format_seconds(seconds: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds * 1e9:.3g} ns"


def format_bytes(n: float | None) -> str:
    if n is None:
        return "-"
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            value = n / scale
            return f"{value:.3g} {unit}" if value < 1000 else f"{value:.0f} {unit}"
    return f"{int(n)} B"


def _memory_text(cell: BenchCell) -> str:
    if not cell.memory:
        return "-"
    if cell.peak_extra_bytes is None:
        return "error"
    return format_bytes(cell.peak_extra_bytes)


def results_table(run: Run) -> str:
    """One row per measured cell; GB/s and % of the read bandwidth too when the run measured it; a share above
    100% of its roof marked, with :data:`ROOF_NOTE` below the table."""
    roof = bool(run.bandwidth)
    paired = any(c.rounds is not None and c.rounds.reference for c in run.bench_cells())
    rows = [_result_row(run, c, roof, paired) for c in run.bench_cells() if c.status != Status.SKIPPED]
    above = any(cell.endswith("%!") for row in rows for cell in row)
    return format_table(("implementation", "case", "mode", "median", "IQR/median", *(("vs reference",) if paired else ()),
                         "GFLOP/s", "% peak", *(("GB/s", "% bw") if roof else ()), "peak extra mem"), rows) + (
        f"\n{ROOF_NOTE}" if above else "")


def _result_row(run: Run, c: BenchCell, roof: bool, paired: bool) -> tuple[str, ...]:
    """One cell's row of :func:`results_table`."""
    if c.status != Status.OK or not c.stats:
        return (c.implementation, c.case_id, c.mode, str(c.status), "-", *(("-",) if paired else ()), "-", "-",
                *(("-", "-") if roof else ()), "-")
    s = c.stats
    spread = f"{100 * (s.iqr_over_median or 0.0):.1f}%" + (" !" if is_noisy(s) else "")
    bandwidth = ("-" if c.gbps is None else f"{c.gbps:.1f}", _percent(run.pct_bandwidth(c))) if roof else ()
    return (c.implementation, c.case_id, c.mode, format_seconds(s.median or 0.0), spread,
            *((_paired_text(c),) if paired else ()), f"{c.gflops:.1f}", _percent(run.pct_peak(c)), *bandwidth,
            _memory_text(c))


MAX_SET_ASIDE = 10


def set_aside_text(aside: Any, where: str) -> str:
    """The report's set-aside cells (:func:`harness.report.trust.set_aside`, a frame) for a terminal: how many and
    why, the first :data:`MAX_SET_ASIDE` by implementation and case, and where the rest are listed ("" for none)."""
    from harness.report.trust import summary

    text = summary(aside)
    if text is None:
        return ""
    lines = [printable(text) + ":"]
    lines += [f"  {printable(r.implementation)} {printable(r.case_id)} {printable(r.mode)}: {printable(r.why)}"
              for r in aside.head(MAX_SET_ASIDE).itertuples()]
    if len(aside) > MAX_SET_ASIDE:
        lines.append(f"  ... and {len(aside) - MAX_SET_ASIDE} more")
    lines.append(f"  listed in {printable(where)}")
    return "\n".join(lines) + "\n"


def _percent(share: float | None) -> str:
    """A share of a roof for a terminal table, marked when above 100% (:data:`ROOF_NOTE` says why)."""
    return "-" if share is None else f"{share:.0f}%" + ("!" if share > 100.0 else "")


ROOF_NOTE = ("! above 100% of a roof measured in this run: the roof was read low (load during the probe, a working "
             "set in the caches, a GEMM on narrower vector units) or the cell is suspect; the report names the likelier")


def _paired_text(cell: BenchCell) -> str:
    """``1.32x [1.21, 1.40] torch_sdpa``: the cell's time over the reference's, paired over the rounds."""
    r = cell.rounds
    if r is not None and r.reference == cell.implementation:
        return "reference"
    if r is None or r.ratio is None or r.reference is None:
        return "-"
    return f"{r.ratio:.2f}x [{r.ratio_low or 0.0:.2f}, {r.ratio_high or 0.0:.2f}] {r.reference}"


def fits_table(fits: Iterable[Row]) -> str:
    """The cost-model fits of a run's sweeps (:func:`harness.analysis.sweepfits.cell_fits`), one line each: the
    fits the report's complexity table shows."""
    rows = []
    for row in fits:
        row = without_short_fit(row)
        if row.fit is None and not row.points:
            continue
        quantity = "memory (output + peak extra)" if row.quantity == "memory" else row.quantity
        theory = "-" if row.theory is None else f"{row.theory:g}"
        fitted = "too few points: no fit" if row.fit is None else row.fit.describe()
        rows.append((row.implementation, f"{quantity} vs {row.axis}", row.sweep, fitted, theory,
                     "-" if row.fit is None else f"R2 {row.fit.r2:.3f}", row.n, row.check))
    return format_table(("implementation", "fit", "sweep", "exponent [interval]", "theory", "quality", "n", "check"),
                        rows)


@dataclass
class VerifySummary:
    """One implementation's verify cells summed up: counts by status, cases, seconds, the worst error / bound
    over the checks that ran (1 is the edge) and the worst passing error / baseline's where the baseline sets
    the bound (:mod:`harness.analysis.margins`)."""

    kind: str
    cases: set[str] = field(default_factory=set)
    checks: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    worst_margin: float | None = None
    worst_ratio: float | None = None
    seconds: float = 0.0

    def count(self, status: str) -> int:
        return self.statuses.get(status, 0)


def summarize(cells: Iterable[VerifyCell], order: Iterable[str] = ()) -> dict[str, VerifySummary]:
    """Per implementation, in ``order`` and then as met, its :class:`VerifySummary`."""
    cells = list(cells)
    present = {c.implementation for c in cells}
    rows: dict[str, VerifySummary | None] = {name: None for name in order if name in present}
    for cell in cells:
        row = rows.get(cell.implementation) or VerifySummary(cell.kind)
        rows[cell.implementation] = row
        row.cases.add(cell.case_id)
        row.checks += 1
        row.statuses[cell.status.value] = row.count(cell.status.value) + 1
        worst = margin(cell.metrics) if cell.status != Status.SKIPPED else None
        if worst is not None:
            row.worst_margin = max(row.worst_margin or 0.0, worst)
        ratio = cell.metrics.get("ratio")
        if cell.status == Status.PASS and baseline_led(cell.metrics) and isinstance(ratio, (int, float)):
            row.worst_ratio = max(row.worst_ratio or 0.0, float(ratio))
        row.seconds += float(cell.seconds or 0.0)
    return {name: row for name, row in rows.items() if row is not None}


def problems(cells: Iterable[VerifyCell]) -> list[VerifyCell]:
    return [c for c in cells if c.status.is_problem]


def _two(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def _fmt(x: object) -> str:
    return f"{x:.3g}" if isinstance(x, float) else "-" if x is None else str(x)


def verify_table(cells: Sequence[VerifyCell], seconds: float, order: Sequence[str] = (),
                 conventions: Mapping[str, Sequence[str]] | None = None) -> str:
    """The summary table, then the failing cases with their numbers, then distinct skip reasons, then the unusual
    conventions implementations declared (``conventions``: name -> plain sentences), which every verdict assumed."""
    from harness.reference.tolerance import describe_rule

    lines = [f"rule: {describe_rule()}", ""]
    rows = [(name, r.kind, len(r.cases), r.checks, *(r.count(s) for s in ("pass", "fail", "error", "crash", "timeout",
                                                                        "skipped")),
             _two(r.worst_margin), _two(r.worst_ratio), f"{r.seconds:.1f}")
            for name, r in summarize(cells, order).items()]
    lines.append(format_table(("implementation", "kind", "cases", "checks", "pass", "fail", "error", "crash",
                               "timeout", "skipped", "worst err/bound", "worst ×base", "seconds"), rows))
    bad = problems(cells)
    if bad:
        lines += ["", f"{len(bad)} problem(s):"]
        for c in bad:
            m = c.metrics
            numbers = "" if not m or m.get("bound") is None else (
                f" [max_abs_err {_fmt(m.get('max_abs_err'))}, bound {_fmt(m.get('bound'))}, ratio {_fmt(m.get('ratio'))}, "
                f"rel_l2 {_fmt(m.get('rel_l2'))}, base_err {_fmt(m.get('base_err'))}, worst_index {m.get('worst_index')}]")
            lines.append(f"  {c.status.value.upper():7} {printable(c.implementation)} {printable(c.case_id)} "
                         f"{printable(c.check)}: {printable(c.reason)}{numbers}")
    skips: dict[tuple[str, str], int] = {}
    for c in cells:
        if c.status == Status.SKIPPED:
            key = (c.implementation, c.reason or "")
            skips[key] = skips.get(key, 0) + 1
    if skips:
        lines += ["", "skipped:"]
        lines += [f"  {printable(name)}: {count} case(s): {printable(reason)}" for (name, reason), count in skips.items()]
    if conventions:
        lines += ["", "declared conventions (every verdict above assumes them):"]
        lines += [f"  {printable(name)}: {printable(note)}" for name, notes in conventions.items() for note in notes]
    lines += ["", f"{len(cells)} checks in {seconds:.1f} s; " + ("all passed" if not bad else f"{len(bad)} problem(s)")]
    return "\n".join(lines)
