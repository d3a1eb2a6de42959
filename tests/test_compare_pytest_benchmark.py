"""`attnbench compare` on pytest-benchmark JSON written by pytest-benchmark itself, and on damaged copies of it.

The files are real: pytest-benchmark runs two tiny functions in a subprocess (one by its calibrated loop, one by
`pedantic` with 4 iterations a round), twice, with and without the raw data. What is asserted is what compare
reads from them (the ratio is the one the files' own per-call times give; a cell's statistics all come from one
source), never how fast this machine is. A file it cannot use is exit 2 and one line naming the file.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli import main

pytestmark = pytest.mark.slow  # pytest-benchmark runs in subprocesses

BENCHMARKS = '''
def work(n):
    total = 0
    for i in range(n):
        total += i
    return total


def test_loop(benchmark):
    benchmark(work, 500)


def test_pedantic(benchmark):
    benchmark.pedantic(work, args=(700,), rounds=12, iterations=4)
'''


def _pytest_benchmark(folder: Path, out: Path, *extra: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "test_tiny.py").write_text(BENCHMARKS)
    (folder / "pytest.ini").write_text("[pytest]\n")  # this folder's own (empty) settings, not the project's
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_XDIST", "PYTEST_ADDOPTS"))}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                           "test_tiny.py", "--benchmark-json", str(out), "--benchmark-max-time", "0.05",
                           "--benchmark-min-rounds", "8", *extra], cwd=folder, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return out


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("pytest-benchmark")
    a = _pytest_benchmark(d / "a", d / "a.json", "--benchmark-save-data")
    summary = json.loads(a.read_text())  # as an older pytest-benchmark, or --benchmark-json without the data, writes it
    for bench in summary["benchmarks"]:
        del bench["stats"]["data"]
    (d / "summary.json").write_text(json.dumps(summary))
    return {"a": a, "b": _pytest_benchmark(d / "b", d / "b.json", "--benchmark-save-data"), "summary": d / "summary.json"}


def _benchmarks(path: Path) -> dict[str, dict[str, object]]:
    return {b["name"]: b for b in json.loads(path.read_text())["benchmarks"]}


def _compare(base: Path, new: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    code = main(["compare", str(base), str(new), "--json"])
    result = json.loads(capsys.readouterr().out)
    assert code == (1 if result["failed"] else 0)
    return result


def test_the_ratio_is_the_one_the_files_raw_data_give(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    result = _compare(files["a"], files["b"], capsys)
    a, b = _benchmarks(files["a"]), _benchmarks(files["b"])
    cells = {str(c["implementation"]).rsplit("::", 1)[-1]: c for c in result["cells"]}  # type: ignore[attr-defined]
    assert set(cells) == {"test_loop", "test_pedantic"}
    assert a["test_pedantic"]["stats"]["iterations"] == 4  # type: ignore[index]
    for name, cell in cells.items():
        base_data, new_data = a[name]["stats"]["data"], b[name]["stats"]["data"]  # type: ignore[index]
        # the per-call times pytest-benchmark stored (each round's time over its iterations), and all of them
        assert cell["n_base"] == len(base_data) and cell["n_new"] == len(new_data)
        assert cell["base_median"] == pytest.approx(statistics.median(base_data))
        assert cell["ratio"] == pytest.approx(statistics.median(new_data) / statistics.median(base_data))
        assert cell["verdict"] in ("slower", "faster", "unchanged", "undecided")
        assert cell["method"] == "separate runs" and cell["low"] <= cell["ratio"] <= cell["high"]
    assert result["interval"] == "95% interval" and result["threshold"] == pytest.approx(0.10)


def test_without_the_raw_data_the_files_median_and_iqr_are_used_together(files: dict[str, Path],
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    result = _compare(files["summary"], files["summary"], capsys)
    stored = _benchmarks(files["summary"])
    for cell in result["cells"]:  # type: ignore[attr-defined]
        stats = stored[str(cell["implementation"]).rsplit("::", 1)[-1]]["stats"]
        assert "data" not in stats
        assert cell["base_median"] == pytest.approx(stats["median"]) and cell["ratio"] == pytest.approx(1.0)
        assert cell["base_noise"] == pytest.approx(stats["iqr"] / stats["median"])
        assert cell["n_base"] == 0 and cell["verdict"] in ("unchanged", "undecided")


def _damage(source: Path, out: Path, change: object) -> Path:
    data = json.loads(source.read_text())
    change(data)  # type: ignore[operator]
    out.write_text(json.dumps(data))
    return out


DAMAGE = {
    "no stats": (lambda d: d["benchmarks"][0].pop("stats"), "has no timing"),
    "empty stats": (lambda d: d["benchmarks"][0].update(stats={}), "has no timing"),
    "a string time": (lambda d: d["benchmarks"][0]["stats"]["data"].__setitem__(0, "fast"), "not a number"),
    "a negative median": (lambda d: d["benchmarks"][0]["stats"].update(median=-1.0, data=[]), "not a time"),
    "zero iterations": (lambda d: d["benchmarks"][1]["stats"].update(iterations=0), "iterations"),
    "the same benchmark twice": (lambda d: d["benchmarks"].append(d["benchmarks"][0]), "a second benchmark"),
    "no benchmarks": (lambda d: d.update(benchmarks=[]), "no bench cells"),
    "stats a list": (lambda d: d["benchmarks"][0].update(stats=[]), "stats"),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_file_it_cannot_use_is_exit_2_with_one_line_naming_it(files: dict[str, Path], tmp_path: Path, damage: str,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    change, words = DAMAGE[damage]
    bad = _damage(files["a"], tmp_path / "damaged.json", change)
    for argv in (["compare", str(files["a"]), str(bad)], ["compare", str(bad), str(files["a"])]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and str(bad) in err and words in err and "Traceback" not in err, err


def test_a_truncated_file_is_exit_2_without_a_traceback(files: dict[str, Path], tmp_path: Path) -> None:
    bad = tmp_path / "cut.json"
    bad.write_text(files["a"].read_text()[:300])
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    done = subprocess.run([sys.executable, "-m", "harness", "compare", str(files["a"]), str(bad)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and str(bad) in done.stderr and "not valid JSON" in done.stderr
