"""Schema v3: a cluster cell carries its node; v2 files read unchanged; reports and comparisons never
divide cells of two kinds of machine. Runs built from the typed schema, written and read as files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.analysis.stats import summarize
from harness.case.attention import AttentionCase
from harness.report.compare import NOT_COMPARABLE, compare_files
from harness.report.load import load
from harness.report.plots import speedup_frame
from harness.results import BenchCell, Run, read_run, write_json_atomic
from harness.results.schema import cell_to_json

FAST = {"cpu_model": "Fast CPU", "cores": 64, "gpu": None, "torch": "2.13.0+cpu", "kind": "Fast CPU x64 / torch 2.13.0+cpu",
        "hostname": "a", "node_id": "n1"}
SLOW = {**FAST, "cpu_model": "Slow CPU", "cores": 2, "kind": "Slow CPU x2 / torch 2.13.0+cpu", "hostname": "b", "node_id": "n2"}


def _cell(impl: str, t: int, seconds: float, node: dict[str, Any] | None) -> BenchCell:
    case = AttentionCase(heads=8, tq=t, tk=t, d=64)
    samples = tuple(seconds * (1 + 0.01 * i) for i in range(9))
    kind = None if node is None else node["kind"]
    return BenchCell(implementation=impl, case=case.to_dict(), case_id=case.id, mode="fwd", status="ok", flops=1e9,
                     peak_key="float32/cpu" + (f"@{kind}" if kind else ""), samples_s=samples, stats=summarize(list(samples)),
                     gflops=1.0 / seconds, node=node, started_at=None if node is None else 100.0,
                     ended_at=None if node is None else 101.0)


def _write(path: Path, cells: list[BenchCell], environment: dict[str, Any] | None = None) -> Path:
    env = environment or {"cpu_model": "Fast CPU", "cores": 64, "gpu": None, "torch": "2.13.0+cpu"}
    write_json_atomic(path, Run(run_id=path.stem, command="bench", complete=True, environment=env, config={},
                                cells=tuple(cells)).to_json())
    return path


def test_a_cluster_cell_round_trips_and_a_local_cell_is_written_as_in_v2(tmp_path: Path) -> None:
    on_node, local = _cell("a", 256, 1e-3, FAST), _cell("a", 512, 1e-3, None)
    run = read_run(_write(tmp_path / "r.json", [on_node, local]))
    assert run.schema_version == 3 and run.cells == (on_node, local)
    assert run.cells[0].node == FAST and run.cells[0].started_at == 100.0
    assert not {"node", "started_at", "ended_at"} & set(cell_to_json(local))
    v2 = json.loads((tmp_path / "r.json").read_text())
    v2["schema_version"], v2["cells"] = 2, [cell_to_json(local)]
    (tmp_path / "v2.json").write_text(json.dumps(v2))
    assert read_run(tmp_path / "v2.json").cells == (local,)


def test_compare_never_divides_two_kinds_of_machine(tmp_path: Path) -> None:
    base = _write(tmp_path / "base.json", [_cell("a", 256, 1e-3, FAST), _cell("a", 512, 1e-3, FAST)])
    new = _write(tmp_path / "new.json", [_cell("a", 256, 3e-3, SLOW), _cell("a", 512, 1e-3, FAST)])
    result = compare_files(base, new)
    by_case = {c.case_id: c for c in result.cells}
    moved = by_case[AttentionCase(heads=8, tq=256, tk=256, d=64).id]
    assert moved.verdict == NOT_COMPARABLE and moved.ratio is None and "Slow CPU" in moved.note
    assert by_case[AttentionCase(heads=8, tq=512, tk=512, d=64).id].ratio is not None
    assert not result.failed  # 3x slower, but on a slower machine: no regression
    local = _write(tmp_path / "local.json", [_cell("a", 256, 1e-3, None)])  # a local run on a Fast CPU machine
    assert compare_files(local, base).cells[0].ratio is not None
    assert compare_files(local, new).cells[0].verdict == NOT_COMPARABLE


def test_report_speedups_stay_within_one_kind(tmp_path: Path) -> None:
    cells = [_cell("torch_sdpa", t, 1e-3, FAST) for t in (256, 512, 1024)]
    cells += [_cell("mine", t, 1e-4, SLOW) for t in (256, 512, 1024)]  # only ever measured on the other kind
    results = load([_write(tmp_path / "r.json", cells)])
    assert set(results.bench["node_kind"]) == {FAST["kind"], SLOW["kind"]}
    _, table = speedup_frame(results.bench, "torch_sdpa")
    assert "mine" not in set(table["implementation"])
