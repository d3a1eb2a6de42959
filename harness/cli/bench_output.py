"""What `attnbench bench` prints once a run is written: the measured roofs, the results table, skipped cells, the
scaling fits, the timings' spread, the value probe's verdict, and the problem cells on stderr (or the whole run as JSON with ``--json``).
Printing only: every figure is read, or derived as the report derives it, from the :class:`~harness.results.Run`
bench wrote.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

from harness.analysis.stats import NOISY_IQR_OVER_MEDIAN, is_noisy, noise_cause
from harness.analysis.values import value_findings
from harness.errors import printable
from harness.report.terminal import fits_table, results_table
from harness.results import BenchCell, Run, Status
from harness.results.files import dumps
from harness.results.schema import INTEGRITY
from harness.runtime.process_tree import usable_cpus


def present(run: Run, out: Path, as_json: bool) -> int:
    """Print the run written to ``out`` (its JSON with ``as_json``, else the machine's roofs, the table, skips,
    fits and spread) and return bench's exit status: 1 when a cell is a problem."""
    cells = run.bench_cells()
    problems = [c for c in cells if c.status.is_problem]
    if as_json:
        print(dumps({"path": str(out), **run.to_json()}, indent=1))
        return 1 if problems else 0
    for line in (*_peak_lines(run), *_bandwidth_lines(run)):
        print(line)
    print()
    print(results_table(run))
    _print_skipped(cells)
    from harness.analysis.sweepfits import cell_fits  # pandas: only once a run is printed, never for --help

    fits = [row for f in cell_fits(run.cells, run.implementations) for row in f.rows]
    if fits:  # a run whose cells form no sweep has no fit
        print("\nscaling fits (the cost model of each sweep, as the report's complexity table shows it):")
        print(fits_table(fits))
    _print_spread(cells)
    _print_values(cells)
    print(f"results: {out}")
    _print_problems(problems)
    return 1 if problems else 0


def _peak_lines(run: Run) -> list[str]:
    """One line per device's measured compute peak (or why it was not measured)."""
    lines = []
    for key, peak in sorted(run.peaks.items()):
        if not peak.gflops:
            lines.append(f"peak {key}: not measured ({peak.error})")
            continue
        readings = ""
        if peak.confirmed_gflops:
            readings = f"; higher of {peak.first_gflops or 0.0:.1f} before and {peak.confirmed_gflops:.1f} after the cells"
        lines.append(f"peak {key}: {peak.gflops:.1f} GFLOP/s ({peak.method}{readings})")
    return lines


def _bandwidth_lines(run: Run) -> list[str]:
    """One line per device's measured memory bandwidth (or why it was not measured)."""
    lines = []
    for where, record in sorted((run.bandwidth or {}).items()):
        if record.read_gbps:
            lines.append(f"bandwidth {where}: read {record.read_gbps:.1f} GB/s, copy {record.copy_gbps or 0.0:.1f} GB/s "
                         f"({record.method}; higher of the readings before and after the cells)")
        else:
            lines.append(f"bandwidth {where}: not measured ({record.error})")
    return lines


def _print_skipped(cells: list[BenchCell]) -> None:
    """Skipped cells counted by implementation and reason, one line each."""
    skipped: dict[tuple[str, str | None], int] = {}
    for c in cells:
        if c.status == Status.SKIPPED:
            skipped[(c.implementation, c.reason)] = skipped.get((c.implementation, c.reason), 0) + 1
    if skipped:
        print("\nskipped:")
        for (name, reason), n in skipped.items():
            print(f"  {printable(name)} ({n} cell{'s' if n > 1 else ''}): {printable(reason)}")


def _print_spread(cells: list[BenchCell]) -> None:
    """The measured cells' spread: a warning on stderr when some are noisy, and the median and worst IQR/median."""
    measured = [c for c in cells if c.status == Status.OK and c.stats]
    noisy = [c for c in measured if is_noisy(c.stats)]
    if noisy:
        cause = noise_cause([c.load_average for c in noisy], usable_cpus(), max((c.threads or 0) for c in noisy))
        print(f"attnbench bench: warning: {len(noisy)} of {len(measured)} cells have "
              f"IQR/median >= {NOISY_IQR_OVER_MEDIAN:.0%} (marked !): {cause}; compare ratios "
              f"within one run, or re-run with a larger --budget", file=sys.stderr)
    spreads = sorted(c.stats.iqr_over_median for c in measured if c.stats and c.stats.iqr_over_median is not None)
    if spreads and not math.isnan(max(spreads)):
        print(f"\nspread IQR/median: median {100 * spreads[len(spreads) // 2]:.1f}%, max {100 * spreads[-1]:.1f}%")


def _print_values(cells: list[BenchCell]) -> None:
    """The value probe's verdict in one line (derived from the stored samples, :mod:`harness.analysis.values`)."""
    note = value_findings(cells).note
    if note:
        print(f"\nvalue probe: {printable(note)}")


def _print_problems(problems: list[BenchCell]) -> None:
    """On stderr: each integrity problem in full, then the first five problem cells."""
    for c in problems:
        if c.status in INTEGRITY:
            print(f"attnbench bench: {c.status}: {printable(c.implementation)} {printable(c.case_id)} {c.mode}: "
                  f"{printable(c.reason)}", file=sys.stderr)
    if problems:
        print(f"attnbench bench: {len(problems)} cell(s) failed: "
              + ", ".join(f"{c.implementation} {c.case_id} {c.mode}: {c.status}" for c in problems[:5]),
              file=sys.stderr)
