"""The files a report or a comparison reads, each as a typed :class:`~harness.results.Run`, told apart by their
content rather than their name:

- attnbench result files (``"schema": "attnbench.results"``, see :mod:`harness.results`), any readable version;
- pytest-benchmark JSON (``pytest --benchmark-json FILE``), whose benchmarks become bench cells: the
  implementation and shape come from ``extra_info`` (which attnbench's own ``suites/performance`` fills in)
  or, failing that, from the test's parameters and name.

Each file is read and checked once; a damaged one is a usage error naming it. No plugin is imported or run.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.analysis.stats import summarize
from harness.errors import UsageError
from harness.results import SCHEMA, BenchCell, Config, Environment, Run, read_text
from harness.results.cells import cell_from_json
from harness.results.files import check_version
from harness.results.paths import parse_json
from harness.results.validate import Damaged, check_cell, check_record


@dataclass(frozen=True)
class Source:
    """One result file a report read: where it is, its format, and its run's identity and machine."""

    path: str
    kind: str
    """"attnbench" or "pytest-benchmark"."""
    run_id: str | None
    command: str
    complete: bool
    environment: Environment


def read_any(path: Path) -> tuple[str, dict[str, Any]]:
    """("attnbench" | "pytest-benchmark", parsed JSON); a clear error for anything else."""
    path = Path(path)
    try:
        data = parse_json(read_text(path), path)
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file; pass a results/*.json file written by attnbench "
                         "or a pytest --benchmark-json file") from None
    if isinstance(data, dict) and data.get("schema") == SCHEMA:
        check_version(data, path)
        return "attnbench", data
    if isinstance(data, dict) and isinstance(data.get("benchmarks"), list):
        return "pytest-benchmark", data
    raise UsageError(f"{path}: neither an attnbench result file (\"schema\": \"{SCHEMA}\") nor "
                     "pytest-benchmark JSON (a \"benchmarks\" list)")


def _first(*values: Any) -> Any:
    return next((v for v in values if v is not None), None)


def _object(value: object, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise Damaged(where, f"{type(value).__name__} where an object belongs")
    return value


def _case_of(extra: dict[str, Any]) -> dict[str, Any]:
    """The attention case a benchmark's ``extra_info`` names (a ``shape`` or ``case`` object, or its fields)."""
    shape = extra.get("shape") if isinstance(extra.get("shape"), dict) else extra.get("case")
    case = dict(shape) if isinstance(shape, dict) else {}
    for key in ("batch", "heads", "kv_heads", "tq", "tk", "d", "dtype", "causal"):
        if key not in case and key in extra:
            case[key] = extra[key]
    if "tq" not in case and "T" in extra:
        case["tq"] = case["tk"] = extra["T"]
    return case


def _timing_of(stats: dict[str, Any], name: str, where: str) -> Any:
    """The benchmark's raw times per call (None without them); damage when it has no timing at all."""
    iterations = stats.get("iterations", 1)
    if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 1:
        raise Damaged(f"{where}.stats.iterations", f"{iterations!r} is not a positive whole number of calls per round")
    samples = stats.get("data")
    if not samples and stats.get("median") is None:
        raise Damaged(f"{where}.stats", f"{name!r} has no timing (no median and no data); write the file "
                      "with `pytest --benchmark-json FILE` (add --benchmark-save-data for the raw times)")
    return samples


def _stored_cell(bench: dict[str, Any], where: str) -> dict[str, Any]:
    """One benchmark as a stored attnbench bench cell, checked as one (:func:`check_cell`)."""
    extra = _object(bench.get("extra_info"), f"{where}.extra_info")
    params = _object(bench.get("params"), f"{where}.params")
    stats = _object(bench.get("stats"), f"{where}.stats")
    implementation = _first(extra.get("implementation"), params.get("implementation"),
                            params.get("impl"), params.get("name"))
    name = str(bench.get("name", "?"))
    samples = _timing_of(stats, name, where)
    stored = {"type": "bench", "implementation": str(implementation or str(bench.get("fullname") or name).split("[")[0]),
              "case": _case_of(extra), "case_id": str(_first(extra.get("case_id"), bench.get("param"), name)),
              "mode": extra.get("mode", "fwd"), "status": "ok",
              "samples_s": samples if isinstance(samples, list) else [],
              "stats": {"median": stats.get("median"), "iqr": stats.get("iqr"), "min": stats.get("min"),
                        "mean": stats.get("mean"), "stdev": stats.get("stddev"), "n": stats.get("rounds")},
              "flops": extra.get("flops"), "gflops": extra.get("gflops"), "threads": extra.get("threads")}
    check_cell(stored, where, summary_only=True)
    return stored


def _summarised(stored: dict[str, Any], where: str) -> None:
    """The cell's stats from its raw data when it has them (every statistic from the data, summarised once), else
    the file's own median and IQR together; a summary that is not its data's is damage."""
    median, iqr = stored["stats"]["median"], stored["stats"]["iqr"]
    stored["stats"]["iqr_over_median"] = iqr / median if iqr is not None and median else None
    if not stored["samples_s"]:
        return
    summary = summarize(stored["samples_s"]).to_json()
    if median is not None and abs(median - summary["median"]) > 1e-6 * summary["median"]:
        raise Damaged(f"{where}.stats.median", f"{median!r} is not the median of its data "
                      f"({summary['median']!r}): the summary and the data are from different runs")
    stored["stats"] = summary


def cells_from_pytest_benchmark(data: dict[str, Any]) -> list[BenchCell]:
    """pytest-benchmark's benchmarks as attnbench bench cells; each is checked as an attnbench cell is
    (:func:`check_cell`), so a damaged file is a named error. pytest-benchmark stores every time per call
    (each round's time divided by its iterations), so rounds of different iteration counts compare as they are.
    With the raw data (``--benchmark-save-data``) a cell's stats are summarised here from that data, never
    taken half from the file's summary; without it, the file's own median and IQR are used together. A
    benchmark with neither a median nor data, or a second benchmark of the same name, is damage."""
    cells = []
    seen: dict[tuple[str, str, str], int] = {}
    for i, bench in enumerate(data["benchmarks"]):
        where = f"benchmarks[{i}]"
        bench = _object(bench, where) if bench is not None else None
        if not bench:
            raise Damaged(where, f"{bench!r} is not a benchmark (an object with a name and stats)")
        stored = _stored_cell(bench, where)
        cell_key = (str(stored["implementation"]), str(stored["case_id"]), str(stored["mode"]))
        if cell_key in seen:
            raise Damaged(where, f"a second benchmark of {str(bench.get('name', '?'))!r} (as benchmarks[{seen[cell_key]}]); "
                          "one file holds one run of each benchmark: write each run to its own --benchmark-json file")
        seen[cell_key] = i
        _summarised(stored, where)
        cells.append(cell_from_json(stored))
    return cells  # type: ignore[return-value]


def load_run(path: Path) -> tuple[str, Run]:
    """(input format, the typed run) for either input format; pytest-benchmark JSON becomes a bench run."""
    kind, data = read_any(path)
    try:
        if kind == "attnbench":
            return kind, Run.from_json(data)
        machine = _object(data.get("machine_info"), "machine_info")
        stored = {"cpu_model": _object(machine.get("cpu"), "machine_info.cpu").get("brand_raw"),
                  "python": machine.get("python_version"), "time": data.get("datetime")}
        check_record(stored, Environment, "machine_info")
        return kind, Run(run_id=Path(path).stem, command="pytest-benchmark", complete=True,
                         environment=Environment.from_json(stored), config=Config(),
                         cells=tuple(cells_from_pytest_benchmark(data)))
    except (ValueError, TypeError, KeyError) as exc:
        raise UsageError(f"{path}: a damaged result file: {exc}") from None


def source_of(path: Path, kind: str, run: Run) -> Source:
    """What a report says of a file it read: where, which format, and its run's identity and machine."""
    return Source(path=str(path), kind=kind, run_id=run.run_id or None, command=run.command, complete=run.complete,
                  environment=run.environment)
