"""A bench cell as the columns its sweep is found and fitted on: one row per cell, read from the typed cell.

Bench (fitting its own cells when a run finishes) and the report (its tables, :mod:`harness.report.load`)
build these columns with the same functions, so a sweep the report finds in a file is the sweep bench found
and fitted, and a fit bench stored is found again (:mod:`harness.analysis.sweepfits`). Nothing here is
derived beyond formatting: the memory a call needs is bench's output bytes plus its extra at the peak.
"""

from __future__ import annotations

from typing import Any

from harness.analysis.scaling import call_footprint
from harness.results import BenchCell, CellCase, Stats, node_kind

CASE_COLUMNS = ("batch", "heads", "kv_heads", "tq", "tk", "d", "dtype", "device", "causal", "mask",
                "inputs", "layout", "bias", "kind", "window", "causal_align")
STAT_COLUMNS = ("median", "iqr", "min", "mean", "stdev", "iqr_over_median", "n")


def case_columns(case: CellCase | None) -> dict[str, object]:
    """The case's fields as columns (None for a cell of no case, or a field its file lacks); a window as
    "left,right" (hashable), files from before structures read as their defaults (no window, top-left)."""
    row: dict[str, Any] = {c: None if case is None else getattr(case, c) for c in CASE_COLUMNS}
    window = row["window"]
    row["window"] = None if window is None else f"{window[0]},{window[1]}"
    row["causal_align"] = row["causal_align"] or "top_left"
    row["serving"] = serving_batch(case)
    return row


def serving_batch(case: CellCase | None) -> str | None:
    """A serving batch's requests by kind ("2 prefill, 32 decode"; :mod:`harness.case.workload`), for a case that is
    one (packed sequences, causal, bottom-right); None for any other."""
    from harness.case.workload import request_kind

    varlen = getattr(case, "varlen", None)
    if not varlen or not getattr(case, "causal", False) or getattr(case, "causal_align", None) != "bottom_right":
        return None
    kinds: dict[str, int] = {}
    for q, kv in varlen:
        kinds[request_kind(q, kv)] = kinds.get(request_kind(q, kv), 0) + 1
    return ", ".join(f"{n} {kind}" for kind, n in kinds.items())


def point_columns(cell: BenchCell) -> dict[str, object]:
    """What a sweep needs of a cell: who and how it ran, its case, its time (median and samples), the memory
    its call needs and, timed in rounds, its ratio to the reference beside it."""
    case = cell.case
    stats = cell.stats or Stats()  # every typed cell arrives with its stats (pytest-benchmark's: its reader)
    row: dict[str, object] = {"implementation": cell.implementation, "mode": cell.mode or "fwd",
                              "status": cell.status.value}
    row.update(case_columns(case))
    varlen = None if case is None else case.varlen  # how many packed sequences (their lengths grow with T: the sweep's axis)
    row["varlen"] = None if varlen is None else f"{len(varlen)} sequences"
    window = None if case is None else case.window  # the typed (left, right): its width is the window sweep's size
    row["window_width"] = None if window is None else window[0] + window[1]
    row.update({"median": stats.median, "iqr": stats.iqr, "min": stats.min, "mean": stats.mean, "stdev": stats.stdev,
                "iqr_over_median": stats.iqr_over_median, "n": stats.n})  # STAT_COLUMNS
    row.update({"peak_bytes": call_footprint(cell),  # what bench measured: the output and the extra at the peak
                "samples_s": list(cell.samples_s),
                "cache_seqlens": None if case is None or case.cache_seqlens is None
                else ",".join(map(str, case.cache_seqlens)),
                "page_size": None if case is None else case.page_size,
                "node_kind": node_kind(cell)})  # a cluster cell's machine: sweeps and ratios stay within one kind
    rounds = cell.rounds
    row.update({"reference": None if rounds is None else rounds.reference,
                "ratio_to_ref": None if rounds is None else rounds.ratio,
                "ratio_low": None if rounds is None else rounds.ratio_low,
                "ratio_high": None if rounds is None else rounds.ratio_high})
    return row


