"""The typed schema: cells round-trip, bad files are named errors, resume and plan share one key, and
the library calls return the typed run that read_run gives back from the file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.bench.sweeps import PlannedCell
from harness.case.attention import AttentionCase
from harness.errors import UsageError
from harness.results import BenchCell, CellKey, Run, Status, VerifyCell, read_run
from harness.results.schema import cell_from_json, cell_to_json


def _bench_cell(**changes: object) -> BenchCell:
    case = AttentionCase(heads=2, tq=16, d=8)
    values: dict[str, object] = dict(implementation="x", case=case.to_dict(), case_id=case.id, mode="fwd",
                                     status="ok", flops=4e6, peak_key="float32/cpu", samples_s=(1e-3, 2e-3, 3e-3),
                                     stats={"median": 2e-3, "iqr_over_median": 0.5}, gflops=2.0)
    values.update(changes)
    return BenchCell(**values)  # type: ignore[arg-type]


def test_cells_round_trip_and_statuses_are_an_enum() -> None:
    bench = _bench_cell()
    verify = VerifyCell(implementation="x", case=None, case_id="-", check="output", status="fail",
                        metrics={"ratio": 3.0})
    for cell in (bench, verify):
        stored = json.loads(json.dumps(cell_to_json(cell)))
        assert cell_from_json(stored) == cell
    assert bench.status is Status.OK and verify.status.is_problem and not bench.status.is_problem
    assert json.loads(json.dumps(cell_to_json(verify)))["status"] == "fail"
    with pytest.raises(ValueError):
        _bench_cell(status="fine")


def test_a_damaged_file_is_a_named_error(tmp_path: Path) -> None:
    run = Run(run_id="r", command="bench", complete=True, environment={}, config={}, cells=(_bench_cell(),))
    good = run.to_json()
    for name, damage in (("field", {"cells": [{**good["cells"][0], "colour": "red"}]}),
                         ("type", {"cells": [{**good["cells"][0], "type": "timing"}]}),
                         ("version", {"schema_version": 99})):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({**good, **damage}))
        with pytest.raises(UsageError) as info:
            read_run(path)
        assert str(path) in str(info.value) and ({"field": "colour", "type": "timing", "version": "99"}[name]
                                                 in str(info.value))


def test_pct_peak_is_computed_from_the_peaks_record() -> None:
    cell = _bench_cell()
    run = Run(run_id="r", command="bench", complete=True, environment={}, config={}, cells=(cell,),
              peaks={"float32/cpu": {"gflops": 8.0}})
    assert run.pct_peak(cell) == 25.0
    assert Run(run_id="r", command="bench", complete=True, environment={}, config={}).pct_peak(cell) is None


def test_the_plan_and_the_stored_cell_share_one_key() -> None:
    case = AttentionCase(heads=2, tq=16, d=8)
    assert PlannedCell("x", case, "fwd").key == _bench_cell().key == CellKey("bench", "x", case.id, "fwd")


def test_the_library_calls_return_the_run_that_is_stored(tmp_path: Path) -> None:
    from harness.verify import VerifySettings
    from harness.verify import run as verify

    out = tmp_path / "verify.json"
    checked = verify(VerifySettings(suite="small", only=("numpy_naive",), trials=1, progress=False), out)
    stored = read_run(out)
    assert checked.complete and stored.complete and checked.command == "verify"
    assert [c.key for c in checked.cells] == [c.key for c in stored.cells] and checked.cells
    assert all(isinstance(c, VerifyCell) and not c.status.is_problem for c in stored.cells)
