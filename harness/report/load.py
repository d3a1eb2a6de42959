"""Result files into tidy tables for the report: one row per cell, one column per field.

Each file is read once as a typed run (:mod:`harness.report.sources`: attnbench result files and pytest-benchmark
JSON); a row formats a typed cell's fields and what bench measured beside it, and re-derives nothing. Reports and
comparisons read only these files; they never import or run a plugin.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from harness.analysis.margins import baseline_led, margin
from harness.analysis.points import CASE_COLUMNS, STAT_COLUMNS, case_columns, point_columns
from harness.errors import UsageError
from harness.report.sources import Source, load_run, source_of
from harness.results import Bandwidth, BandwidthKey, BenchCell, Coverage, Memory, Peak, PeakKey, Run, VerifyCell

ROUNDS_COLUMNS = ("reference", "ratio_to_ref", "ratio_low", "ratio_high", "ratio_confidence", "round_medians_s",
                  "pct_peak_beside", "pct_bandwidth_beside", "roof_problem")
"""Cells timed in rounds (:class:`~harness.results.Rounds`): the paired ratio to the reference contender with its
interval, each round's median, the shares of the roofs measured beside the cell, and a roof problem."""
ROOF_PROBLEM_BYTES = 128 * 2**20
"""A cell's % of the read bandwidth beside it is held to 100% only when its compulsory bytes are this many or more:
a smaller working set may be served from the caches, faster than the probe's 256 MiB read."""
BENCH_COLUMNS = ("source", "implementation", "case_id", "mode", "status", "reason", *CASE_COLUMNS, "window_width", "varlen",
                 "serving",
                 *STAT_COLUMNS, "flops", "gflops", "pct_peak", "peak_extra_bytes", "output_bytes", "peak_bytes",
                 "memory_method",
                 "threads", "samples_s", "bytes", "gbps", "pct_bandwidth", "cache_seqlens", "page_size", "node_kind", "profile",
                 *ROUNDS_COLUMNS)
GROWTH_COLUMNS = ("implementation", "dtype", "T", "status", "max_abs_err", "base_err", "bound")
VERIFY_COLUMNS = ("source", "implementation", "case_id", "group", "check", "status", "reason",
                  *CASE_COLUMNS, "max_abs_err", "rel_l2", "ratio", "bound", "margin", "base_err", "floor", "baseline_led",
                  "seconds")


@dataclass
class Results:
    """Everything a report needs, gathered from one or more result files."""

    bench: pd.DataFrame
    verify: pd.DataFrame
    peaks: dict[PeakKey, Peak] = field(default_factory=dict)
    """Measured peak per "dtype/device", e.g. {"float32/cpu": Peak(gflops=175.0)}."""
    bandwidth: dict[BandwidthKey, Bandwidth] = field(default_factory=dict)
    """Measured memory bandwidth per "device/threads=N", e.g. {"cpu/threads=2": Bandwidth(read_gbps=48.0)}."""
    sources: list[Source] = field(default_factory=list)
    """One entry per file, in the order given."""
    implementations: dict[str, Mapping[str, object]] = field(default_factory=dict)
    """Per implementation, whatever the files said about it (description, capabilities), if anything."""
    coverage: dict[str, Coverage] = field(default_factory=dict)
    """Per implementation: the pairs of declared axis values its verify cases exercised (verify files)."""
    growth: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=GROWTH_COLUMNS))
    """The error-growth sweep: max error and the same-dtype baseline's against T, per implementation and dtype."""
    bench_cells: tuple[BenchCell, ...] = ()
    """The typed bench cells behind :attr:`bench`'s rows, in its order (a later file's cell replacing an earlier one)."""


def bench_row(cell: BenchCell, source: str, pct_peak: float | None, pct_bandwidth: float | None = None
              ) -> dict[str, object]:
    """The cell's sweep columns (:func:`harness.analysis.points.point_columns`, as bench fits them) and what the
    report shows beside them: its work, rates, memory, profile and the roofs read beside it."""
    memory = cell.memory or Memory()
    row: dict[str, object] = {"source": source, "case_id": cell.case_id, "reason": cell.reason}
    row.update(point_columns(cell))
    row.update({"flops": cell.flops, "gflops": cell.gflops, "pct_peak": pct_peak,
                "peak_extra_bytes": memory.peak_extra_bytes, "output_bytes": memory.output_bytes,
                "memory_method": memory.method, "threads": cell.threads,
                "bytes": cell.bytes, "gbps": cell.gbps, "pct_bandwidth": pct_bandwidth, "profile": profile_text(cell)})
    row.update(rounds_columns(cell))
    return row


def rounds_columns(cell: BenchCell) -> dict[str, object]:
    """:data:`ROUNDS_COLUMNS` of a cell (all None for a cell not timed in rounds). A cell faster than the roof
    read beside it in the same rounds is a measurement problem, said in ``roof_problem``: above the GEMM times
    its headroom (:attr:`~harness.results.Rounds.gemm_headroom`: torch's GEMM may run AVX2 code where the CPU
    has AVX-512, as MKL does on AMD CPUs, and a kernel using the wider unit outruns it), or above 100% of the
    read bandwidth for a working set beyond the caches."""
    rounds = cell.rounds
    out: dict[str, object] = dict.fromkeys(ROUNDS_COLUMNS)
    if rounds is None:
        return out
    pct_peak = None if not rounds.gemm_gflops or cell.gflops is None else 100.0 * cell.gflops / rounds.gemm_gflops
    gbps = cell.gbps
    pct_bw = None if not rounds.read_gbps or gbps is None else 100.0 * gbps / rounds.read_gbps
    problems = []
    headroom = rounds.gemm_headroom or 1.0  # a kernel on a wider vector unit than the GEMM's may outrun it this much
    if pct_peak is not None and pct_peak > 100.0 * headroom:
        beyond = "" if headroom == 1.0 else f", {headroom:g}x which a kernel on this CPU's widest vector unit may reach"
        problems.append(f"{pct_peak:.0f}% of the GEMM peak measured beside it ({rounds.gemm_gflops:.3g} GFLOP/s{beyond})")
    if pct_bw is not None and pct_bw > 100.0 and (cell.bytes or 0.0) >= ROOF_PROBLEM_BYTES:
        problems.append(f"{pct_bw:.0f}% of the read bandwidth measured beside it ({rounds.read_gbps:.3g} GB/s)")
    out.update({"reference": rounds.reference, "ratio_to_ref": rounds.ratio, "ratio_low": rounds.ratio_low,
                "ratio_high": rounds.ratio_high, "ratio_confidence": rounds.confidence,
                "round_medians_s": None if rounds.medians_s is None else list(rounds.medians_s),
                "pct_peak_beside": pct_peak, "pct_bandwidth_beside": pct_bw,
                "roof_problem": "; ".join(problems) + ": a measurement problem" if problems else None})
    return out


def profile_text(cell: BenchCell) -> str | None:
    """The profiled call's top ATen operators, "93% aten::x; 4% aten::y" (None when not profiled)."""
    if not cell.profile:
        return None if cell.profile is None else "no ATen operator"
    return "; ".join(f"{100 * share:.0f}% {name}" for name, share in cell.profile)


def verify_row(cell: VerifyCell, source: str) -> dict[str, object]:
    metrics = cell.metrics or {}
    row: dict[str, object] = {"source": source, "implementation": cell.implementation, "case_id": cell.case_id,
                           "group": cell.group or "default", "check": cell.check or "output",
                           "status": cell.status.value, "reason": cell.reason}
    row.update(case_columns(cell.case))
    row.update({m: metrics.get(m) for m in ("max_abs_err", "rel_l2", "ratio", "bound", "base_err", "floor")})
    row["margin"] = margin(metrics)
    row["baseline_led"] = baseline_led(metrics)  # False: the floor sets the bound and the ratio measures nothing
    row["seconds"] = cell.seconds
    return row



def _frame(rows: list[dict[str, object]], columns: Iterable[str], key: list[str]) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=list(columns))
    if not frame.empty:  # a cell measured again in a later file replaces the earlier one
        frame = frame.drop_duplicates(subset=key, keep="last").reset_index(drop=True)
    return frame


def _implementation_info(value: object) -> dict[str, Mapping[str, object]]:
    """What a result file says about its implementations: {name: info} or [{"name": ..., ...}]."""
    if isinstance(value, dict):
        return {str(k): v for k, v in value.items() if isinstance(v, dict)}
    if isinstance(value, list):
        return {str(v["name"]): v for v in value if isinstance(v, dict) and "name" in v}
    return {}


def load(paths: Iterable[Path]) -> Results:
    """All cells of all files; a later file's cell replaces an earlier one with the same key."""
    bench_rows: list[dict[str, object]] = []
    verify_rows: list[dict[str, object]] = []
    growth_rows: list[dict[str, object]] = []
    peaks: dict[PeakKey, Peak] = {}
    bandwidth: dict[BandwidthKey, Bandwidth] = {}
    sources: list[Source] = []
    implementations: dict[str, Mapping[str, object]] = {}
    coverage: dict[str, Coverage] = {}
    bench_cells: dict[tuple[str, str, str], BenchCell] = {}
    paths = list(paths)
    if not paths:
        raise UsageError("no result files given; pass one or more results/*.json files")
    benches: list[tuple[str, Run]] = []  # the files that hold bench cells (a verify file holds none, nor fits)
    for path in paths:
        kind, run = load_run(Path(path))
        if run.bench_cells():
            benches.append((kind, run))
        meta = source_of(Path(path), kind, run)
        sources.append(meta)
        peaks.update(run.peaks)
        bandwidth.update(run.bandwidth or {})
        implementations.update(_implementation_info(run.implementations))
        coverage.update(run.coverage or {})
        for cell in run.cells:
            if isinstance(cell, BenchCell):
                key = (cell.implementation, cell.case_id, cell.mode or "fwd")
                bench_cells.pop(key, None)  # the later cell takes the later place, as the table's row does
                bench_cells[key] = cell
                bench_rows.append(bench_row(cell, meta.run_id or str(path), run.pct_peak(cell), run.pct_bandwidth(cell)))
            else:
                verify_rows.append(verify_row(cell, meta.run_id or str(path)))
                if cell.check == "error_growth" and cell.case:
                    growth_rows.append({"implementation": cell.implementation, "dtype": cell.case.dtype,
                                        "T": cell.metrics.get("T", cell.case.tk), "status": cell.status.value,
                                        "max_abs_err": cell.metrics.get("max_abs_err"),
                                        "base_err": cell.metrics.get("base_err"),
                                        "bound": cell.metrics.get("bound")})
    bench = _frame(bench_rows, BENCH_COLUMNS, ["implementation", "case_id", "mode"])
    verify = _frame(verify_rows, VERIFY_COLUMNS, ["implementation", "group", "case_id", "check"])
    growth = _frame(growth_rows, GROWTH_COLUMNS, ["implementation", "dtype", "T"])
    return Results(bench=bench, verify=verify, peaks=peaks, sources=sources, implementations=implementations,
                   coverage=coverage, growth=growth, bandwidth=bandwidth, bench_cells=tuple(bench_cells.values()))
