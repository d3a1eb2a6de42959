"""History across commits: six commits' result files, one implementation slowed on purpose at one commit.

The files are written in the test (the synthetic bench runs of test_report_data, each with its own
noise), stamped with a commit and a time, and handed over out of order: the history orders them
by time, and the step detection must mark exactly the slowed implementation's cells, at that
commit, with the ratio, and nothing for a 3% change of the whole machine or for noise.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from test_report_data import bench_cases, write_bench_run

from harness.analysis.steps import detect_steps
from harness.cli import main
from harness.report.history import history
from harness.results import load_results, write_json_atomic

COMMITS = [f"{i:x}" * 40 for i in range(10, 16)]  # six 40-character "commit ids": aaaa..., bbbb..., ...
SLOW_FROM = 3
"""The first commit at which "tiled" is 1.4x slower (and stays so)."""


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    d = tmp_path_factory.mktemp("history")
    paths = []
    for i, commit in enumerate(COMMITS):
        machine = 1.03 if i == 1 else 1.0  # a busier day: every cell 3% slower, not a step
        slow = {name: machine for name in ("numpy_naive", "torch_eager", "torch_sdpa")}
        slow["tiled"] = machine * (1.4 if i >= SLOW_FROM else 1.0)
        path = write_bench_run(d / f"run-{i}.json", seed=100 + i, slow=slow)
        data = load_results(path)
        data["environment"] = {**data["environment"], "git_commit": commit, "time": f"2026-11-{10 + i}T12:00:00+00:00"}
        write_json_atomic(path, data)
        paths.append(path)
    return paths[::-1]  # newest first: the history orders them by their recorded time


def test_exactly_the_slowed_implementation_steps_at_that_commit(files: list[Path]) -> None:
    h = history(files)
    assert [c.label for c in h.commits] == [c[:10] for c in COMMITS]
    stepped = {s.implementation for s, _ in h.steps}
    assert stepped == {"tiled"}
    tiled = [s for s in h.series if s.implementation == "tiled"]
    assert len(tiled) == len(bench_cases()) and all(len(s.steps) == 1 for s in tiled)
    for s in tiled:
        (step,) = s.steps
        assert step.index == SLOW_FROM and step.label == COMMITS[SLOW_FROM][:10]
        assert step.ratio == pytest.approx(1.4, rel=0.03)
        assert all(p.low <= p.median <= p.high for p in s.points)


def test_report_history_writes_the_view(files: list[Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "hist"
    assert main(["report", "--history", *map(str, files), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"{len(bench_cases())} step(s)" in printed and f"x1.40 at {COMMITS[SLOW_FROM][:10]}" in printed
    with open(out / "history.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 6 * 4 * len(bench_cases())
    steps = [r for r in rows if r["step_ratio"]]
    assert {(r["implementation"], r["commit"]) for r in steps} == {("tiled", COMMITS[SLOW_FROM][:10])}
    page = (out / "history.html").read_text()
    assert "data:image/png;base64," in page and "<script" not in page and "×1.40" in page
    assert "×1.40" in (out / "history.md").read_text() and (out / "plots" / "history.png").stat().st_size > 10_000


def test_step_detection_ignores_noise_and_a_one_commit_blip() -> None:
    assert detect_steps([1.0, 1.01, 0.99, 1.02, 0.98, 1.0, 1.01]) == []
    assert detect_steps([1.0, 1.0, 1.04, 1.04, 1.04]) == []  # below the 5% a step must change
    (up, down) = detect_steps([1.0, 1.0, 1.01, 2.0, 2.02, 1.99, 1.0, 1.01], list("abcdefgh"))
    assert (up.label, round(up.ratio, 1), down.label, round(down.ratio, 1)) == ("d", 2.0, "g", 0.5)


def test_each_step_is_judged_by_the_comparison_engine(files: list[Path]) -> None:
    """The step's verdict is the engine's on the commit before it against the commit it starts at (1.4x: slower),
    with its MDE; history.csv carries both."""
    h = history(files)
    judged = h.judged_steps
    assert judged and all(verdict is not None and verdict.verdict == "slower" for _, _, verdict in judged)
    assert all(v is not None and v.low > 1.0 and v.mde_or_none is not None and v.mde < 1.4 for _, _, v in judged)
    frame = h.frame()
    assert set(frame["step_verdict"].dropna()) == {"slower"} and frame["step_mde"].notna().sum() == len(judged)
