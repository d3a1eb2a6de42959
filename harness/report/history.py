"""History across commits: each bench cell's median in result files from successive commits, and its steps.

The files are ordered by the time their run recorded (``environment.time``; the order given
breaks ties and stands in for files without one) and labelled by the commit they ran
(``environment.git_commit``, else the run id). Each cell (implementation, case, mode) measured
in two files or more becomes a series: per commit its median and a distribution-free 95%
interval for that median from the raw samples. Steps are found on the whole series by
:func:`harness.analysis.steps.detect_steps` (a penalised piecewise-constant fit, as asv's
step detection), never by comparing neighbours against a threshold. Each detected step is then judged
by the comparison engine (:func:`harness.analysis.comparison.judge_separate`, as ``compare`` judges two
separate runs): the commit before the step against the commit where it starts, with their raw samples,
at the default threshold and a 95% interval shared over every step of the history, so a step is called
"slower" only where those two runs decide it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from harness.analysis.comparison import (
    DEFAULT_ALPHA,
    DEFAULT_THRESHOLD,
    Side,
    Verdict,
    judge_separate,
    median_interval,
    per_cell_alpha,
    spread,
)
from harness.analysis.steps import Step, detect_steps
from harness.errors import UsageError
from harness.report.load import load
from harness.report.sources import Source

COMMIT_CHARS = 10


@dataclass(frozen=True)
class Commit:
    """One result file in the history."""

    path: str
    label: str
    """The commit (shortened), or the run id when the file recorded none."""
    time: str | None
    run_id: str | None


@dataclass(frozen=True)
class Point:
    position: int
    """Index into :attr:`History.commits`."""
    median: float
    low: float
    high: float


@dataclass(frozen=True)
class Series:
    implementation: str
    case_id: str
    mode: str
    points: tuple[Point, ...]
    steps: tuple[Step, ...]
    verdicts: tuple[Verdict, ...] = ()
    """The engine's verdict on each step (the commit before it against the commit it starts at), as ``steps``."""

    @property
    def name(self) -> str:
        return f"{self.implementation} {self.case_id} {self.mode}"


@dataclass(frozen=True)
class History:
    commits: tuple[Commit, ...]
    series: tuple[Series, ...]

    @property
    def steps(self) -> list[tuple[Series, Step]]:
        """Every detected step with its series, largest change first."""
        return [(s, step) for s, step, _ in self.judged_steps]

    @property
    def judged_steps(self) -> list[tuple[Series, Step, Verdict | None]]:
        """Every detected step with its series and the engine's verdict on it, largest change first."""
        found = [(s, step, s.verdicts[i] if i < len(s.verdicts) else None)
                 for s in self.series for i, step in enumerate(s.steps)]
        return sorted(found, key=lambda item: -abs(math.log(item[1].ratio)))

    def frame(self) -> pd.DataFrame:
        """One row per cell and commit (history.csv): median, interval, and the step ratio where a level starts."""
        rows = []
        for s in self.series:
            starts = {step.index: (step.ratio, s.verdicts[k] if k < len(s.verdicts) else None)
                      for k, step in enumerate(s.steps)}
            for i, p in enumerate(s.points):
                commit = self.commits[p.position]
                ratio, verdict = starts.get(i, (None, None))
                rows.append({"implementation": s.implementation, "case_id": s.case_id, "mode": s.mode,
                             "position": p.position, "commit": commit.label, "time": commit.time, "median": p.median,
                             "low": p.low, "high": p.high, "step_ratio": ratio,
                             "step_verdict": None if verdict is None else verdict.verdict,
                             "step_mde": None if verdict is None else verdict.mde_or_none})
        return pd.DataFrame(rows, columns=["implementation", "case_id", "mode", "position", "commit", "time", "median",
                                           "low", "high", "step_ratio", "step_verdict", "step_mde"])


def _commit(path: Path, source: Source) -> Commit:
    env = source.environment  # a plugin's runs follow the plugin's repository, not attnbench's own
    commit = env.plugin_commit or env.git_commit
    label = str(commit)[:COMMIT_CHARS] if commit else str(source.run_id or path.stem)
    time = source.environment.time
    return Commit(path=str(path), label=label, time=str(time) if time else None, run_id=source.run_id)


CommitPoint = tuple[int, float, Sequence[float], float | None]
"""(position of the commit, median, samples, load average) of one cell in one commit's file."""


def _loaded(paths: Iterable[Path]) -> list[tuple[str, int, Path, Any]]:
    """The files read, ordered by recorded time (the order given breaks ties and stands in for none)."""
    loaded = []
    for i, path in enumerate(Path(p) for p in paths):
        results = load([path])
        loaded.append((results.sources[0].environment.time or "", i, path, results))
    if len(loaded) < 2:
        raise UsageError("a history needs result files from at least two commits")
    if all(time for time, *_ in loaded):
        loaded.sort(key=lambda item: (item[0], item[1]))
    return loaded


def _cells_by_commit(loaded: list[tuple[str, int, Path, Any]]) -> dict[tuple[str, str, str], list[CommitPoint]]:
    """Each ``ok`` cell's points, one per commit that measured it."""
    cells: dict[tuple[str, str, str], list[CommitPoint]] = {}
    for position, (_, _, _, results) in enumerate(loaded):
        bench = results.bench
        if bench.empty:
            continue
        ok = bench[(bench["status"] == "ok") & bench["median"].notna()]
        for row in ok.itertuples():
            samples: Sequence[float] = row.samples_s if isinstance(row.samples_s, list) else []
            run_load = getattr(row, "load_average", None)
            known_load = float(run_load) if run_load is not None and run_load == run_load else None
            cells.setdefault((str(row.implementation), str(row.case_id), str(row.mode)), []).append(
                (position, float(row.median), samples, known_load))
    return cells


def _point(position: int, median: float, kept: Sequence[float]) -> Point:
    low, high, _ = median_interval(kept, DEFAULT_ALPHA) if len(kept) >= 2 else (median, median, 0.0)
    return Point(position, median, min(low, median), max(high, median))


def history(paths: Iterable[Path]) -> History:
    """Read result files from successive commits (any order) into a :class:`History`."""
    loaded = _loaded(paths)
    commits = tuple(_commit(path, results.sources[0]) for _, _, path, results in loaded)
    found = []
    for (impl, case_id, mode), points in sorted(_cells_by_commit(loaded).items()):
        if len(points) < 2:
            continue
        built = tuple(_point(position, median, kept) for position, median, kept, _ in points)
        steps = detect_steps([p.median for p in built], [commits[p.position].label for p in built],
                             [s for _, _, s, _ in points])
        found.append((impl, case_id, mode, points, built, tuple(steps)))
    cell_alpha = per_cell_alpha(DEFAULT_ALPHA, sum(len(steps) for *_, steps in found))
    series = [Series(impl, case_id, mode, built, steps,
                     tuple(_judge_step(points[step.index - 1], points[step.index], cell_alpha) for step in steps))
              for impl, case_id, mode, points, built, steps in found]
    return History(commits=commits, series=tuple(series))


def _judge_step(before: CommitPoint,
                after: CommitPoint, cell_alpha: float) -> Verdict:
    """The engine's verdict on one step: the commit before it against the commit it starts at, as two separate runs."""
    def side(point: CommitPoint) -> Side:
        _, median, samples, load = point
        return Side(median=median, samples=tuple(float(x) for x in samples), iqr_over_median=spread(samples),
                    load=load)

    return judge_separate(side(before), side(after), DEFAULT_THRESHOLD, cell_alpha)
