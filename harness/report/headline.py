"""The headline: what a reader needs from a report in a few lines, before any table.

The machine (CPU, threads, the GEMM peaks measured on it); the fastest implementation in each
regime the bench results cover (the shortest and the longest T, causal or not, forward or
forward+backward), with its margin over the next; which implementations failed
verification, with the first reason; and each implementation's worst error against its
bound. Plain sentences: summary.md and index.html each escape and lay them out their own way.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from harness.report.load import Results
from harness.results import Environment

PROBLEMS = ("fail", "error", "crash", "timeout")
REASON_CHARS = 160


@dataclass(frozen=True)
class Line:
    label: str
    text: str


def _machine(results: Results) -> Line | None:
    found = next((s.environment for s in reversed(results.sources) if s.environment), None)
    if found is None and not results.peaks:
        return None
    env = found or Environment()
    parts = [str(env.cpu_model or "unknown CPU")]
    if env.cores:
        parts.append(f"{env.cores} cores")
    if env.threads:
        parts.append(f"{env.threads} thread(s) per timed call")
    peaks = [f"{key} {peak.gflops:.0f} GFLOP/s" for key, peak in sorted(results.peaks.items()) if peak.gflops]
    if peaks:
        parts.append("measured GEMM peak " + ", ".join(peaks))
    reads = [f"{key} {r.read_gbps:.0f} GB/s" for key, r in sorted(results.bandwidth.items()) if r.read_gbps]
    if reads:
        parts.append("measured read bandwidth " + ", ".join(reads))
    return Line("Machine", "; ".join(parts))


def _decode(bench: pd.DataFrame) -> Line | None:
    """The fastest implementation at the longest-cache decode step measured, with its share of the bandwidth."""
    if bench.empty or "gbps" not in bench:
        return None
    ok = bench[(bench["status"] == "ok") & bench["median"].notna() & (bench["tq"] < bench["tk"])]
    if ok.empty:
        return None
    longest = ok[ok["tk"] == ok["tk"].max()]
    case_id = str(longest.sort_values("case_id")["case_id"].iloc[0])
    at = longest[longest["case_id"] == case_id].sort_values("median").drop_duplicates("implementation")
    best = at.iloc[0]
    text = winner(at)
    if pd.notna(best.get("gbps")):
        text += f"; {float(best['gbps']):.1f} GB/s"
        if pd.notna(best.get("pct_bandwidth")):
            text += f" = {float(best['pct_bandwidth']):.0f}% of the read bandwidth"
    return Line(f"Fastest decode step ({case_id})", text + f" ({len(at)} measured)")


def _listed(values: object) -> list[float] | None:
    """A list of positive numbers from a frame cell (None when it holds none)."""
    if not isinstance(values, (list, tuple)) or not values:
        return None
    out = [float(v) for v in values]
    return out if all(v > 0 for v in out) else None


def ratio_interval(best: pd.Series, second: pd.Series) -> tuple[float, float, str] | None:
    """An interval for ``second``'s time over ``best``'s: from the medians of the rounds they were timed in
    together (paired: a load change hits both), else from their samples' quartiles (q1 over q3 to q3 over q1:
    wide, as unpaired samples on a shared machine deserve); None without either."""
    from harness.analysis.stats import median_interval, quantile

    a, b = _listed(best.get("round_medians_s")), _listed(second.get("round_medians_s"))
    if a is not None and b is not None and len(a) == len(b) and len(a) >= 2:
        _, low, high, coverage = median_interval([y / x for x, y in zip(a, b)])
        return low, high, f"{coverage:.0%} interval over {len(a)} interleaved rounds"
    a, b = _listed(best.get("samples_s")), _listed(second.get("samples_s"))
    if a is None or b is None or len(a) < 2 or len(b) < 2:
        return None
    a, b = sorted(a), sorted(b)
    return quantile(b, 0.25) / quantile(a, 0.75), quantile(b, 0.75) / quantile(a, 0.25), "interquartile ranges"


def winner(at: pd.DataFrame) -> str:
    """The fastest of ``at`` (sorted by median) and its margin over the next, or "tied within noise" when the
    margin's interval does not exclude 1: noise never decides a headline."""
    best = at.iloc[0]
    if len(at) < 2:
        return str(best["implementation"])
    second = at.iloc[1]
    ratio = float(second["median"]) / float(best["median"])
    interval = ratio_interval(best, second)
    if interval is None:
        return f"{best['implementation']}, {ratio:.2f}x faster than {second['implementation']} (no interval: samples not stored)"
    low, high, how = interval
    if low > 1.0:
        return f"{best['implementation']}, {ratio:.2f}x faster than {second['implementation']} ([{low:.2f}, {high:.2f}], {how})"
    return (f"{best['implementation']} and {second['implementation']} tied within noise ({ratio:.2f}x, "
            f"[{low:.2f}, {high:.2f}], {how})")


def _regime_name(t: int, short: int, long: int, causal: bool, mode: str) -> str:
    length = f"short T ({t})" if t == short and t != long else f"long T ({t})"
    return f"{length}, {'causal' if causal else 'no mask'}, {mode}"


def _fastest(bench: pd.DataFrame) -> list[Line]:
    """Per regime, the fastest implementation at that regime's size, with its margin over the next."""
    if bench.empty:
        return []
    ok = bench[(bench["status"] == "ok") & bench["median"].notna()].copy()
    ok = ok[ok["tq"] == ok["tk"]]  # decode steps (Tq < Tk) have a line of their own
    if ok.empty:
        return []
    ok["causal"] = ok["causal"].fillna(False).astype(bool)
    lines = []
    for (causal, mode), group in ok.groupby(["causal", "mode"], sort=True):
        # the sizes of the widest T sweep in this regime: the other case fields at their most common values
        sizes = ["d", "heads", "batch", "dtype"] + (["node_kind"] if "node_kind" in group else [])  # one machine kind
        fixed = group[sizes].apply(lambda row: "-".join(map(str, row)), axis=1)
        group = group[fixed == fixed.mode().iloc[0]]
        ts = sorted({int(t) for t in group["tq"]})
        for t in sorted({ts[0], ts[-1]}):
            at = group[group["tq"] == t].sort_values("median")
            at = at.drop_duplicates("implementation")
            if at.empty:
                continue
            text = winner(at) + f" ({len(at)} measured)"
            lines.append(Line(f"Fastest, {_regime_name(t, ts[0], ts[-1], bool(causal), str(mode))}", text))
    return lines


def _failures(verify: pd.DataFrame) -> Line | None:
    if verify.empty:
        return None
    bad = verify[verify["status"].isin(PROBLEMS)]
    checked = verify[verify["status"] != "skipped"]["implementation"].nunique()
    if bad.empty:
        return Line("Verification", f"all {checked} verified implementation(s) passed every check")
    parts = []
    for name, group in bad.groupby("implementation", sort=True):
        first = group.iloc[0]
        reason = str(first["reason"] or first["status"])
        if len(reason) > REASON_CHARS:
            reason = reason[:REASON_CHARS - 1] + "…"
        parts.append(f"{name} ({len(group)} problem cell(s); first: {first['case_id']} {first['check']}: {reason})")
    return Line("Verification failed", "; ".join(parts))


MAX_MARGINS = 8


def _margins(margins: pd.DataFrame | None) -> Line | None:
    """The worst error / bound per implementation, worst first: how much room each pass had."""
    if margins is None or margins.empty:
        return None
    parts = [f"{r.implementation} {float(r.margin):.2f} ({r.group})" for r in margins.head(MAX_MARGINS).itertuples()]
    if len(margins) > MAX_MARGINS:
        parts.append(f"… {len(margins) - MAX_MARGINS} more, all at most {float(margins['margin'].iloc[MAX_MARGINS]):.2f}")
    return Line("Worst margin (error / bound; 1 is the edge, a pass is at most 1)", "; ".join(parts))


def headline(results: Results, margins: pd.DataFrame | None = None) -> list[Line]:
    """The headline's lines; ``margins`` is :func:`harness.report.tables.worst_margins` of the verify cells."""
    lines = [_machine(results), *_fastest(results.bench), _decode(results.bench), _failures(results.verify),
             _margins(margins)]
    return [line for line in lines if line is not None]
