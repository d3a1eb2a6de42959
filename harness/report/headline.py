"""The headline: what a reader needs from a report in a few lines, before any table.

The machine (CPU, threads, the GEMM peaks measured on it); the fastest implementation in each
regime the bench results cover (the shortest and the longest T, causal or not, forward or
forward+backward), with its margin over the next, ranked on one case from the cells that count
(:mod:`harness.report.trust`); how many cells were left out or flagged, and why; which implementations failed
verification, with the first reason; and each implementation's worst error against its
bound. Plain sentences: summary.md and index.html each escape and lay them out their own way.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from harness.report.load import Results
from harness.report.trust import ANCHOR, TITLE, above_roof, counted, mark, set_aside, summary
from harness.results import Environment

PROBLEMS = ("fail", "error", "crash", "timeout")
REASON_CHARS = 160


@dataclass(frozen=True)
class Line:
    label: str
    text: str
    anchor: str = ""
    """The id of the section that lists what the line counts (a page links to it)."""


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
    """The fastest implementation at the longest-cache decode step measured, with its share of the bandwidth
    (marked when above 100% of it: :func:`harness.report.trust.above_roof`)."""
    if bench.empty or "gbps" not in bench:
        return None
    ran = bench[(bench["status"] != "skipped") & (bench["tq"] < bench["tk"])]
    ok = ran[counted(ran)] if not ran.empty else ran
    if ok.empty:
        return None
    longest = ok[ok["tk"] == ok["tk"].max()]
    case_id = _most_counted(longest)
    at = longest[longest["case_id"] == case_id].sort_values("median")
    best = at.iloc[0]
    text = winner(at)
    if pd.notna(best.get("gbps")):
        text += f"; {float(best['gbps']):.1f} GB/s"
        if pd.notna(best.get("pct_bandwidth")):
            note = above_roof(best.to_dict())
            text += f" = {mark(best['pct_bandwidth'], note)}% of the read bandwidth"
            if note is not None and float(best["pct_bandwidth"]) > 100.0:
                text += f" ({note})"
    return Line(f"Fastest decode step ({case_id})", text + _ranked(at, ran[ran["case_id"] == case_id], ran))


def _most_counted(ok: pd.DataFrame) -> str:
    """The case with the most counted cells (ties: the first by id): the one case a ranking compares on."""
    sizes = ok.groupby("case_id")["implementation"].nunique()
    return str(sorted(sizes.index, key=lambda c: (-int(sizes[c]), str(c)))[0])


def _ranked(at: pd.DataFrame, here: pd.DataFrame, regime: pd.DataFrame) -> str:
    """``(3 ranked on <case>; not ranked: b (implausible); not measured here: c)``: who was compared, and who
    of the regime's implementations was not, on the one case a ranking reads."""
    ranked = set(at["implementation"])
    left = here[~here["implementation"].isin(ranked)].drop_duplicates("implementation")
    text = f" ({len(ranked)} ranked on {at['case_id'].iloc[0]}"
    if not left.empty:
        text += "; not ranked: " + ", ".join(
            f"{r.implementation} ({'above a roof measured beside it' if r.status == 'ok' else r.status})"
            for r in left.sort_values("implementation").itertuples())
    absent = sorted(set(regime["implementation"]) - set(here["implementation"]))
    if absent:
        text += "; not measured here: " + ", ".join(map(str, absent))
    return text + ")"


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
    """Per regime, the fastest implementation at that regime's shortest and longest T, each ranked on one case
    only (the one most implementations counted at that T), from counted cells only
    (:func:`harness.report.trust.counted`); who was left out of the ranking is named."""
    if bench.empty:
        return []
    ran = bench[(bench["status"] != "skipped") & (bench["tq"] == bench["tk"])].copy()  # decode steps: a line of their own
    if ran.empty:
        return []
    ran["causal"] = ran["causal"].fillna(False).astype(bool)
    lines = []
    for (causal, mode), regime in ran.groupby(["causal", "mode"], sort=True):
        ok = regime[counted(regime)]
        if ok.empty:
            continue
        # the sizes of the widest T sweep in this regime: the other case fields at their most common values
        sizes = ["d", "heads", "batch", "dtype"] + (["node_kind"] if "node_kind" in ok else [])  # one machine kind
        fixed = ok[sizes].apply(lambda row: "-".join(map(str, row)), axis=1)
        ok = ok[fixed == fixed.mode().iloc[0]]
        ts = sorted({int(t) for t in ok["tq"]})
        for t in sorted({ts[0], ts[-1]}):
            case_id = _most_counted(ok[ok["tq"] == t])
            at = ok[ok["case_id"] == case_id].sort_values("median")
            text = winner(at) + _ranked(at, regime[regime["case_id"] == case_id], regime)
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


def _set_aside(bench: pd.DataFrame) -> Line | None:
    """How many bench cells were left out of the rankings or flagged, and why (:func:`harness.report.trust.summary`)."""
    text = summary(set_aside(bench))
    return None if text is None else Line("Cells left out or flagged", f"{text}; each listed under \"{TITLE}\"",
                                          ANCHOR)


def headline(results: Results, margins: pd.DataFrame | None = None) -> list[Line]:
    """The headline's lines; ``margins`` is :func:`harness.report.tables.worst_margins` of the verify cells."""
    lines = [_machine(results), _set_aside(results.bench), *_fastest(results.bench), _decode(results.bench), _failures(results.verify),
             _margins(margins)]
    return [line for line in lines if line is not None]
