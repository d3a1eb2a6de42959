"""Which bench cells a report's conclusions rest on, and what it says about the others.

A conclusion (the headline's fastest, a speedup) is drawn only from cells that count (:func:`counted`): measured
(``ok``), with a median, and not faster than the roof read beside them in the same rounds (a measurement problem).
Every other cell that ran is set aside, and a counted cell may still be flagged (noisy, above a roof measured at
the run's start and end): :func:`set_aside` lists each once, with why, and the top of every report says how many
(:func:`summary`). A cell above 100% of a measured roof is marked :data:`ROOF_MARK` wherever its percentage shows,
with its likely cause (:func:`above_roof`, :data:`ROOF_FOOTNOTE`). Pure functions of the stored cells.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import pandas as pd

from harness.analysis.stats import NOISY_IQR_OVER_MEDIAN
from harness.report.load import ROOF_PROBLEM_BYTES

ANCHOR = "set-aside"
"""The id of the set-aside table in ``index.html`` (``index.html#set-aside``)."""
MD_ANCHOR = "cells-set-aside-or-flagged"
"""The slug GitHub gives summary.md's heading of the same table."""
TITLE = "Cells set aside or flagged"
ROOF_MARK = "!"
"""Beside a percentage above 100% of a measured roof, in every table that shows one."""
ROOF_FOOTNOTE = ("! above 100% of a roof measured in this run: either the roof was read low (load during the probe, "
                 "a working set served from the caches, a GEMM on narrower vector units than the kernel's) or the "
                 "cell is suspect (its time is not all its work); the cause named beside it is the likelier one")
PERCENT_COLUMNS = ("pct_peak", "pct_bandwidth", "pct_peak_beside", "pct_bandwidth_beside")
SET_ASIDE_COLUMNS = ("implementation", "case_id", "mode", "status", "counted", "why")


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(float(value)):
        return None
    return float(value)


def _problem(row: Mapping[str, object]) -> str | None:
    """The cell's roof problem (:func:`harness.report.load.rounds_columns`), None when it has none."""
    value = row.get("roof_problem")
    return value if isinstance(value, str) and value else None


def counted(bench: pd.DataFrame) -> pd.Series:
    """Per row of ``bench``: the cell counts (ok, a median, no roof problem beside it)."""
    if bench.empty:
        return pd.Series(dtype=bool)
    ok = (bench["status"] == "ok") & bench["median"].notna()
    if "roof_problem" in bench:
        ok &= bench["roof_problem"].isna()
    return ok


def above_roof(row: Mapping[str, object]) -> str | None:
    """The likely cause when a cell's share of a measured roof is above 100% (None when none is): a suspect cell
    when it beats the roof read beside it in its own rounds (``roof_problem``), else a low roof reading (the
    run-level roof read under load while the one beside the cell holds it; a working set small enough for the
    caches; a GEMM on narrower vector units, within the CPU's headroom)."""
    over = [c for c in PERCENT_COLUMNS if (v := _number(row.get(c))) is not None and v > 100.0]
    if not over:
        return None
    if _problem(row) is not None:
        return "suspect cell: faster than the roof read beside it in the same rounds"
    beside = [c for c in over if c.endswith("_beside")]
    if not beside and any(_number(row.get(f"{c}_beside")) is not None for c in over):
        return "low roof reading: the run's roof was read low; the roof read beside the cell holds it"
    if all("bandwidth" in c for c in over) and (_number(row.get("bytes")) or 0.0) < ROOF_PROBLEM_BYTES:
        return "low roof reading for this size: its working set fits the caches, which outrun the 256 MiB read probe"
    if beside:
        return "low roof reading: the GEMM measured beside it runs narrower vector code than the CPU has"
    return "low roof reading or a suspect cell: no roof was read beside it to tell"


def mark(value: object, note: str | None) -> object:
    """A percentage as shown in a table: rounded, with :data:`ROOF_MARK` when above 100% of its roof."""
    number = _number(value)
    if number is None:
        return value
    return f"{number:.0f}{ROOF_MARK}" if note is not None and number > 100.0 else round(number, 1)


def _why(row: Mapping[str, object], ok: bool) -> list[tuple[str, str]]:
    """(kind, reason) for every reason a cell that ran is set aside or flagged (none for a clean counted cell)."""
    why = []
    status = str(row.get("status"))
    if status != "ok":
        reason = row.get("reason")
        why.append((status, f"{status}: {reason}" if isinstance(reason, str) and reason else status))
    elif not ok and (problem := _problem(row)) is not None:
        why.append(("roof problem", f"roof problem: {problem}"))
    elif not ok:
        why.append(("no median", "no median"))
    if status == "ok" and ok and (note := above_roof(row)) is not None:
        why.append(("above a roof", f"above a measured roof ({note})"))
    spread = _number(row.get("iqr_over_median"))
    if status == "ok" and spread is not None and spread >= NOISY_IQR_OVER_MEDIAN:
        why.append(("noisy", f"noisy: IQR/median {spread:.0%} (ranked only where its interval allows)"))
    return why


def set_aside(bench: pd.DataFrame) -> pd.DataFrame:
    """Each bench cell that ran and does not count (left out of every ranking and speedup: counted "no"), or counts
    but is flagged (noisy, above a roof: counted "flagged"), once, with every reason (``why``) and their kinds
    (``kind``); skipped cells never ran and are not listed. Those left out first, then by implementation and case."""
    if bench.empty:
        return pd.DataFrame(columns=list(SET_ASIDE_COLUMNS))
    keep = counted(bench)
    rows = []
    for (_, row), ok in zip(bench.iterrows(), keep, strict=True):
        if row["status"] == "skipped":
            continue
        why = _why(row.to_dict(), bool(ok))
        if why:
            rows.append({"implementation": row["implementation"], "case_id": row["case_id"], "mode": row["mode"],
                         "status": row["status"], "counted": "flagged" if ok else "no",
                         "why": "; ".join(w for _, w in why), "kind": ", ".join(k for k, _ in why)})
    frame = pd.DataFrame(rows, columns=[*SET_ASIDE_COLUMNS, "kind"])
    frame["left_out"] = frame["counted"] == "no"
    frame = frame.sort_values(["left_out", "implementation", "case_id", "mode"], ascending=[False, True, True, True],
                              kind="stable")
    return frame.drop(columns="left_out").reset_index(drop=True)


def _kinds(aside: pd.DataFrame, counted_as: str) -> str:
    kinds: dict[str, int] = {}
    for listed in aside[aside["counted"] == counted_as]["kind"]:
        for kind in str(listed).split(", "):
            kinds[kind] = kinds.get(kind, 0) + 1
    return ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0])))


def summary(aside: pd.DataFrame) -> str | None:
    """One sentence for the top of a report: how many cells were left out and flagged, and why (None: none)."""
    if aside.empty:
        return None
    left = int((aside["counted"] == "no").sum())
    flagged = int((aside["counted"] == "flagged").sum())
    parts = []
    if left:
        parts.append(f"{left} bench cell(s) left out of every ranking and speedup ({_kinds(aside, 'no')})")
    if flagged:
        parts.append(f"{flagged} counted but flagged ({_kinds(aside, 'flagged')})")
    return "; ".join(parts)
