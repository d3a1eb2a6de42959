"""History across commits: each bench cell's median in result files from successive commits, and its steps.

The files are ordered by the time their run recorded (``environment.time``; the order given
breaks ties and stands in for files without one) and labelled by the commit they ran
(``environment.git_commit``, else the run id). Each cell (implementation, case, mode) measured
in two files or more becomes a series: per commit its median and a distribution-free 95%
interval for that median from the raw samples. Steps are found on the whole series by
:func:`harness.analysis.steps.detect_steps` (a penalised piecewise-constant fit, as asv's
step detection), never by comparing neighbours against a threshold.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from harness.analysis.steps import Step, detect_steps, median_interval
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
        found = [(s, step) for s in self.series for step in s.steps]
        return sorted(found, key=lambda pair: -abs(math.log(pair[1].ratio)))

    def frame(self) -> pd.DataFrame:
        """One row per cell and commit (history.csv): median, interval, and the step ratio where a level starts."""
        rows = []
        for s in self.series:
            starts = {step.index: step.ratio for step in s.steps}
            for i, p in enumerate(s.points):
                commit = self.commits[p.position]
                rows.append({"implementation": s.implementation, "case_id": s.case_id, "mode": s.mode,
                             "position": p.position, "commit": commit.label, "time": commit.time, "median": p.median,
                             "low": p.low, "high": p.high, "step_ratio": starts.get(i)})
        return pd.DataFrame(rows, columns=["implementation", "case_id", "mode", "position", "commit", "time", "median",
                                           "low", "high", "step_ratio"])


def _commit(path: Path, source: Source) -> Commit:
    env = source.environment  # a plugin's runs follow the plugin's repository, not attnbench's own
    commit = env.plugin_commit or env.git_commit
    label = str(commit)[:COMMIT_CHARS] if commit else str(source.run_id or path.stem)
    time = source.environment.time
    return Commit(path=str(path), label=label, time=str(time) if time else None, run_id=source.run_id)


def history(paths: Iterable[Path]) -> History:
    """Read result files from successive commits (any order) into a :class:`History`."""
    loaded = []
    for i, path in enumerate(Path(p) for p in paths):
        results = load([path])
        loaded.append((results.sources[0].environment.time or "", i, path, results))
    if len(loaded) < 2:
        raise UsageError("a history needs result files from at least two commits")
    if all(time for time, *_ in loaded):  # by recorded time; the order given breaks ties (and stands in for none)
        loaded.sort(key=lambda item: (item[0], item[1]))
    commits = tuple(_commit(path, results.sources[0]) for _, _, path, results in loaded)
    cells: dict[tuple[str, str, str], list[tuple[int, float, Sequence[float]]]] = {}
    for position, (_, _, _, results) in enumerate(loaded):
        bench = results.bench
        if bench.empty:
            continue
        ok = bench[(bench["status"] == "ok") & bench["median"].notna()]
        for row in ok.itertuples():
            samples: Sequence[float] = row.samples_s if isinstance(row.samples_s, list) else []
            cells.setdefault((str(row.implementation), str(row.case_id), str(row.mode)), []).append(
                (position, float(row.median), samples))
    series = []
    for (impl, case_id, mode), points in sorted(cells.items()):
        if len(points) < 2:
            continue
        built = []
        for position, median, kept in points:
            low, high = median_interval(kept) if len(kept) >= 2 else (median, median)
            built.append(Point(position, median, min(low, median), max(high, median)))
        steps = detect_steps([p.median for p in built], [commits[p.position].label for p in built],
                             [s for _, _, s in points])
        series.append(Series(impl, case_id, mode, tuple(built), tuple(steps)))
    return History(commits=commits, series=tuple(series))
