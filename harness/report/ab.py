"""The verdict of an A/B comparison: per cell the median per-round ratio, its 95% interval, its MDE and the noise seen.

Decided by the comparison engine (:func:`harness.analysis.comparison.judge_paired`): "slower" is a median
ratio beyond the threshold whose interval lies above 1. Only a slower cell, or a cell the head can no
longer run, fails the comparison. ``attnbench compare`` on the side files gives the same verdicts.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from harness.analysis.comparison import (
    FASTER,
    SLOWER,
    interval_words,
    judge_paired,
    level_note,
    per_cell_alpha,
    spread,
)
from harness.bench.ab import BASE, HEAD, ABRun, CellRounds

NEWLY_FAILING, NOT_COMPARED = "newly failing", "not compared"


@dataclass
class ABCell:
    implementation: str
    case_id: str
    mode: str
    verdict: str
    rounds: int = 0
    base_median_s: float | None = None
    head_median_s: float | None = None
    ratio: float | None = None
    """Median of the per-round ratios head / base: above 1 is slower."""
    low: float | None = None
    high: float | None = None
    """The cell's 95% interval for that median (its share of the comparison's joint 95%)."""
    mde: float | None = None
    """Minimum detectable effect: the smallest ratio this cell's noise lets it decide (None: nothing decidable)."""
    ratio_spread: float | None = None
    """IQR / median of the per-round ratios: the noise the pairing left."""
    base_spread: float | None = None
    """IQR / median of base's per-round times: the noise the load put on each side (the pairing cancels it)."""
    load_min: float | None = None
    load_max: float | None = None
    note: str = ""


@dataclass
class ABResult:
    base: str
    head: str
    threshold: float
    alpha: float
    cell_alpha: float
    rounds: int
    calls: int
    processes: int = 1
    """The pairs of worker processes the rounds were spread over."""
    clock: str = "wall"
    """What timed each call: "cpu" (the worker's CPU time) or "wall" (elapsed time)."""
    cells: list[ABCell] = field(default_factory=list)
    provenance: dict[str, Any] = field(default_factory=dict)

    @property
    def slower(self) -> list[ABCell]:
        return [c for c in self.cells if c.verdict == SLOWER]

    @property
    def faster(self) -> list[ABCell]:
        return [c for c in self.cells if c.verdict == FASTER]

    @property
    def newly_failing(self) -> list[ABCell]:
        return [c for c in self.cells if c.verdict == NEWLY_FAILING]

    @property
    def failed(self) -> bool:
        return bool(self.slower or self.newly_failing)

    def as_dict(self) -> dict[str, Any]:
        return {"base": self.base, "head": self.head, "threshold": self.threshold, "alpha": self.alpha,
                "cell_alpha": self.cell_alpha, "rounds": self.rounds, "calls": self.calls,
                "processes": self.processes, "clock": self.clock,
                "interval": interval_words(self.alpha), "confidence": 1 - self.alpha,
                "false_alarm_bound": self.alpha / 2, "failed": self.failed,
                "slower": len(self.slower), "faster": len(self.faster), "newly_failing": len(self.newly_failing),
                "provenance": self.provenance, "cells": [asdict(c) for c in self.cells]}


def judge_cell(cell: CellRounds, threshold: float, cell_alpha: float) -> ABCell:
    """One cell's verdict at interval level ``1 - cell_alpha`` (the engine's paired rule)."""
    out = ABCell(cell.implementation, cell.case.id, cell.mode, verdict=NOT_COMPARED, rounds=len(cell.ratios))
    if cell.load:
        out.load_min, out.load_max = min(cell.load), max(cell.load)
    if cell.status != "ok":
        newly = cell.side == HEAD and cell.status not in ("skipped",)
        out.verdict, out.note = (NEWLY_FAILING if newly else NOT_COMPARED), f"{cell.status}: {cell.reason}"
        return out
    out.base_median_s, out.head_median_s = statistics.median(cell.base_s), statistics.median(cell.head_s)
    verdict = judge_paired(cell.ratios, threshold, cell_alpha, cell.processes)
    out.verdict, out.ratio, out.low, out.high, out.mde = (verdict.verdict, verdict.ratio, verdict.low, verdict.high,
                                                          verdict.mde_or_none)
    out.ratio_spread, out.base_spread, out.note = verdict.ratio_spread, spread(cell.base_s), verdict.reason
    return out


def judge(run: ABRun, threshold: float, alpha: float) -> ABResult:
    """Every cell judged; each interval at level ``1 - alpha / (cells compared)``."""
    compared = sum(c.status == "ok" for c in run.cells)
    cell_alpha = per_cell_alpha(alpha, compared)
    s = run.settings
    return ABResult(base=s.base, head=s.head, threshold=threshold, alpha=alpha, cell_alpha=cell_alpha,
                    rounds=s.rounds, calls=s.calls, processes=s.processes, clock=s.clock,
                    cells=[judge_cell(c, threshold, cell_alpha) for c in run.cells],
                    provenance={side: asdict(p) for side, p in run.provenance.items()})


HEADERS = ("implementation", "case", "mode", "head/base", interval_words(), "MDE", "verdict", "rounds", "ratio IQR",
           "base IQR", "load", "note")


def _pct(x: float | None) -> str:
    return "" if x is None else f"{x:.0%}"


def rows(cells: Sequence[ABCell]) -> list[tuple[str, ...]]:
    return [(c.implementation, c.case_id, c.mode, "" if c.ratio is None else f"{c.ratio:.3f}x",
             "" if c.low is None else f"[{c.low:.3f}, {c.high:.3f}]", "" if c.mde is None else f"{c.mde:.3f}x",
             c.verdict, str(c.rounds),
             _pct(c.ratio_spread), _pct(c.base_spread),
             "" if c.load_min is None else f"{c.load_min:.1f}-{c.load_max:.1f}", c.note) for c in cells]


def summary_line(result: ABResult) -> str:
    t = f"{result.threshold:.0%}"
    slower, faster, failing = len(result.slower), len(result.faster), len(result.newly_failing)
    compared = sum(c.ratio is not None for c in result.cells)
    undecided = sum(c.verdict == "undecided" for c in result.cells)
    extra = f", {failing} cell(s) newly failing in head" if failing else ""
    return (f"{compared} cell(s) compared over {result.rounds} interleaved rounds: {slower} slower, {faster} faster "
            f"beyond {t}, {undecided} undecided{extra} (false-alarm bound {result.alpha / 2:.1%} for the whole "
            "comparison).")


def markdown(result: ABResult) -> str:
    """GitHub-flavoured Markdown for a job summary: the verdict, the commits, every cell with its noise."""
    from harness.report.markdown import md_table

    lines = ["# attnbench ab", "", f"Base `{result.base}` vs head `{result.head}`.", "",
             f"**{summary_line(result)}**", ""]
    for side in (BASE, HEAD):
        commit = (result.provenance.get(side) or {}).get("plugin_commit")
        if commit:
            lines.append(f"- {side} commit `{str(commit)[:12]}`")
    lines += ["", md_table(HEADERS, rows(result.cells)), "",
              f"Each round times base and head in a random order, {result.calls} calls each "
              f"({'on the CPU time of each call' if result.clock == 'cpu' else 'on the wall clock'}); the ratio is the median "
              f"of the per-round ratios, the interval a distribution-free one for that median. "
              + level_note(result.alpha, sum(c.ratio is not None for c in result.cells))
              + " \"ratio IQR\" is the noise the pairing left; \"base IQR\" the noise the load put on each side."]
    return "\n".join(lines) + "\n"
