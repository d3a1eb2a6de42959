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
from harness.results.files import check_version, parse_json
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


def cells_from_pytest_benchmark(data: dict[str, Any]) -> list[BenchCell]:
    """pytest-benchmark's benchmarks as attnbench bench cells (samples only when saved with the data);
    each is checked as an attnbench cell is (:func:`check_cell`), so a damaged file is a named error. Each
    arrives with its stats, as a bench cell does: summarised here from its samples when the file kept only
    those, so nothing past the reader summarises a cell again."""
    cells = []
    for i, bench in enumerate(data["benchmarks"]):
        where = f"benchmarks[{i}]"
        bench = _object(bench, where) if bench is not None else None
        if not bench:
            raise Damaged(where, f"{bench!r} is not a benchmark (an object with a name and stats)")
        extra = _object(bench.get("extra_info"), f"{where}.extra_info")
        params = _object(bench.get("params"), f"{where}.params")
        stats = _object(bench.get("stats"), f"{where}.stats")
        shape = extra.get("shape") if isinstance(extra.get("shape"), dict) else extra.get("case")
        case = dict(shape) if isinstance(shape, dict) else {}
        for key in ("batch", "heads", "kv_heads", "tq", "tk", "d", "dtype", "causal"):
            if key not in case and key in extra:
                case[key] = extra[key]
        if "tq" not in case and "T" in extra:
            case["tq"] = case["tk"] = extra["T"]
        implementation = _first(extra.get("implementation"), params.get("implementation"),
                                params.get("impl"), params.get("name"))
        name = str(bench.get("name", "?"))
        samples = stats.get("data")
        stored = {"type": "bench", "implementation": str(implementation or name.split("[")[0]), "case": case,
                  "case_id": str(_first(extra.get("case_id"), bench.get("param"), name)),
                  "mode": extra.get("mode", "fwd"), "status": "ok",
                  "samples_s": samples if isinstance(samples, list) else [],
                  "stats": {"median": stats.get("median"), "iqr": stats.get("iqr"), "min": stats.get("min"),
                            "mean": stats.get("mean"), "stdev": stats.get("stddev"), "n": stats.get("rounds")},
                  "flops": extra.get("flops"), "gflops": extra.get("gflops"), "threads": extra.get("threads")}
        check_cell(stored, where)
        median, iqr = stored["stats"]["median"], stored["stats"]["iqr"]
        stored["stats"]["iqr_over_median"] = iqr / median if iqr is not None and median else None
        if (median is None or iqr is None) and stored["samples_s"]:  # its data without a summary: summarised once
            stored["stats"] = summarize(stored["samples_s"]).to_json()
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
