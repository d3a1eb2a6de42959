"""The report's tables: the correctness matrix, failures, a bench summary, and their CSV files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from harness.analysis.growth import Row
from harness.report.trust import PERCENT_COLUMNS, above_roof, mark
from harness.results.paths import write_atomic

PROBLEMS = ("fail", "error", "crash", "timeout")
"""Verify outcomes that are a finding, worst first."""


def _worst(values: pd.Series) -> float | None:
    numbers = pd.to_numeric(values, errors="coerce").dropna()
    return float(numbers.max()) if not numbers.empty else None


def _cell(group: pd.DataFrame) -> dict[str, Any]:
    counts = group["status"].value_counts().to_dict()
    ran = group[group["status"] != "skipped"]
    margin = _worst(ran["margin"]) if "margin" in ran else None
    led = ran[ran["baseline_led"].fillna(False).astype(bool)] if "baseline_led" in ran else ran
    ratio = _worst(led["ratio"][pd.to_numeric(led["ratio"], errors="coerce").abs() != float("inf")])
    status = next((s for s in PROBLEMS if counts.get(s)), "pass" if counts.get("pass") else "skipped")
    skipped = int(counts.get("skipped", 0))
    if status == "skipped":
        text = f"skipped ({skipped})"
    else:
        bad = sum(counts.get(s, 0) for s in PROBLEMS)
        text = f"{counts.get('pass', 0)} pass" if status == "pass" else f"{bad} {status}, {counts.get('pass', 0)} pass"
        if skipped:
            text += f", {skipped} skip"
    numbers = ([f"err/bound {'≤' if status == 'pass' else ''}{margin:.2f}"] if margin is not None else []) + (
        [f"×base {'≤' if status == 'pass' else ''}{ratio:.2f}"] if ratio is not None else [])
    if numbers:
        text += "\n" + ", ".join(numbers)
    return {"status": status, "text": text, "worst_margin": margin, "worst_ratio": ratio, "total": len(group),
            **{f"n_{s}": int(counts.get(s, 0)) for s in ("pass", *PROBLEMS, "skipped")}}


def correctness_matrix(verify: pd.DataFrame) -> pd.DataFrame:
    """Implementation x case group; each entry a dict: status, text, worst_margin (error / bound: a pass is
    at most 1), worst_ratio (error / the baseline's, where the baseline sets the bound) and counts."""
    if verify.empty:
        return pd.DataFrame()
    groups = sorted(verify["group"].astype(str).unique())
    impls = sorted(verify["implementation"].astype(str).unique())
    matrix = pd.DataFrame(index=impls, columns=groups, dtype=object)
    for (impl, group), cells in verify.groupby(["implementation", "group"]):
        matrix.at[str(impl), str(group)] = _cell(cells)
    return matrix


def correctness_long(matrix: pd.DataFrame) -> pd.DataFrame:
    """The matrix as one row per (implementation, group), for CSV."""
    rows = [{"implementation": impl, "group": group,
             **{k: v for k, v in matrix.at[impl, group].items() if k != "text"}}
            for impl in matrix.index for group in matrix.columns if isinstance(matrix.at[impl, group], dict)]
    return pd.DataFrame(rows)


def failures(verify: pd.DataFrame) -> pd.DataFrame:
    """Every verify cell that failed, errored, crashed or timed out, with its numbers."""
    if verify.empty:
        return verify
    bad = verify[verify["status"].isin(PROBLEMS)]
    return bad[["implementation", "case_id", "check", "status", "margin", "ratio", "max_abs_err", "rel_l2", "reason"]]


INTEGRITY = ("implausible", "violation", "wrong")
"""Bench statuses of a cell whose time is not backed by a verified computation (docs/integrity.md)."""


def untrusted(bench: pd.DataFrame) -> pd.DataFrame:
    """Bench cells flagged by the integrity checks, with the reasons that prove it."""
    if bench.empty:
        return bench
    return bench[bench["status"].isin(INTEGRITY)][["implementation", "case_id", "mode", "status", "median", "reason"]]


def roof_problems(bench: pd.DataFrame) -> pd.DataFrame:
    """Bench cells faster than a roof measured beside them (:func:`harness.report.load.rounds_columns`)."""
    if bench.empty or "roof_problem" not in bench:
        return bench.iloc[0:0]
    return bench[bench["roof_problem"].notna()][["implementation", "case_id", "mode", "median", "roof_problem"]]


def bench_summary(bench: pd.DataFrame) -> pd.DataFrame:
    """Per bench cell, the numbers people read (no raw samples)."""
    if bench.empty:
        return bench
    columns = ["implementation", "case_id", "mode", "status", "median", "iqr_over_median", "n", "gflops",
               "pct_peak", "peak_extra_bytes", "peak_bytes", "reason"]
    if "gbps" in bench and bench["gbps"].notna().any():  # runs that measured the bandwidth: GB/s beside GFLOP/s
        columns[columns.index("pct_peak") + 1:columns.index("pct_peak") + 1] = ["gbps", "pct_bandwidth"]
    if "ratio_to_ref" in bench and bench["ratio_to_ref"].notna().any():  # timed in rounds: the paired ratio
        columns[columns.index("n") + 1:columns.index("n") + 1] = ["reference", "ratio_to_ref", "ratio_low",
                                                                  "ratio_high"]
    if "pct_peak_beside" in bench and bench["pct_peak_beside"].notna().any():  # roofs read beside the cells
        columns[columns.index("pct_peak") + 1:columns.index("pct_peak") + 1] = ["pct_peak_beside"]
        if "pct_bandwidth" in columns:
            columns.insert(columns.index("pct_bandwidth") + 1, "pct_bandwidth_beside")
        columns.append("roof_problem")
    if "node_kind" in bench and bench["node_kind"].notna().any():  # a cluster run: which kind of machine
        columns.append("node_kind")
    if "profile" in bench and bench["profile"].notna().any():  # what one profiled call spent its time in
        columns.append("profile")
    notes = [above_roof(row) for row in bench.to_dict("records")]
    frame = bench[columns].assign(**({"above_roof": notes} if any(n is not None for n in notes) else {}))
    return frame.sort_values(["implementation", "mode", "case_id"]).reset_index(drop=True)


def marked(frame: pd.DataFrame) -> pd.DataFrame:
    """A bench table as a page shows it: each percentage above 100% of its roof with
    :data:`harness.report.trust.ROOF_MARK` (the cause is in its ``above_roof`` column)."""
    if "above_roof" not in frame:
        return frame
    out = frame.copy()
    for column in PERCENT_COLUMNS:
        if column in out:
            out[column] = [mark(v, n) for v, n in zip(out[column], out["above_roof"], strict=True)]
    return out


COMPLEXITY_COLUMNS = ("implementation", "quantity", "axis", "exponent", "low", "high", "theory", "off_by", "flagged",
                      "check", "dominates", "regimes", "model", "r2", "n", "sweep")


def complexity_frame(rows: list[Row]) -> pd.DataFrame:
    return pd.DataFrame([r.as_dict() for r in rows], columns=list(COMPLEXITY_COLUMNS))


def worst_margins(verify: pd.DataFrame) -> pd.DataFrame:
    """Per implementation: its worst error / bound over the checks it ran, with that check's group, case and
    status, worst first (an implementation without a bounded check is left out)."""
    columns = ["implementation", "margin", "group", "case_id", "check", "status"]
    if verify.empty or "margin" not in verify:
        return pd.DataFrame(columns=columns)
    ran = verify[(verify["status"] != "skipped")].assign(margin=pd.to_numeric(verify["margin"], errors="coerce"))
    ran = ran[ran["margin"].notna()]
    if ran.empty:
        return pd.DataFrame(columns=columns)
    worst = ran.sort_values("margin", ascending=False, kind="stable").drop_duplicates("implementation")
    return worst[columns].reset_index(drop=True)


def _without_default_structure(frame: pd.DataFrame) -> pd.DataFrame:
    """Leave out the structure columns when no row has a structure, so a run without any reads as before."""
    plain = ("window" not in frame or bool(frame["window"].isna().all())) and (
        "causal_align" not in frame or bool(frame["causal_align"].isin(["top_left", None]).all())) and (
        "varlen" not in frame or bool(frame["varlen"].isna().all()))
    return frame.drop(columns=[c for c in ("window", "causal_align", "varlen") if c in frame]) if plain else frame


def write_csvs(out: Path, tables: dict[str, pd.DataFrame]) -> list[Path]:
    """Each non-empty table as ``<out>/<name>.csv`` (:func:`write_csv`)."""
    written = []
    for name, frame in tables.items():
        if frame is None or frame.empty:
            continue
        path = out / f"{name}.csv"
        write_csv(path, _without_default_structure(frame))
        written.append(path)
    return written


_FORMULA = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: object) -> object:
    """A text cell a spreadsheet would run as a formula (``=HYPERLINK(...)``, ``+``, ``-``, ``@``, a leading tab or
    carriage return), with a leading apostrophe: shown as text. Numbers, and the "-" of an empty cell, stay."""
    if not isinstance(value, str) or not value.startswith(_FORMULA) or value == "-":
        return value
    try:
        float(value)
        return value
    except ValueError:
        return "'" + value


def write_csv(path: Path, frame: pd.DataFrame) -> None:
    """``frame`` as CSV at ``path``, every text cell inert in a spreadsheet (:func:`csv_cell`), written whole."""
    safe = frame.copy()
    for column in safe.columns:
        if not pd.api.types.is_numeric_dtype(safe[column]):
            safe[column] = safe[column].map(csv_cell)
    write_atomic(path, safe.to_csv(index=False))
