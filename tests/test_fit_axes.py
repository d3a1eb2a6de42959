"""One list of fit axes serves bench's printed fits and the report's sweeps, and a cell gives its typed case.

Synthetic cells with known costs: nothing here is timed, so nothing depends on the machine or its load.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from harness.analysis import slices, sweepfits
from harness.analysis.points import point_columns
from harness.analysis.scaling import AXES
from harness.case.attention import AttentionCase
from harness.reference.flops import work_g
from harness.report.load import BENCH_COLUMNS, bench_row
from harness.results import BenchCell, Config, Environment, Run, read_run
from harness.results.files import write_json_atomic


def _cell(case: AttentionCase, seconds: float, implementation: str = "x") -> BenchCell:
    return BenchCell(implementation=implementation, case=case.to_dict(), case_id=case.id, mode="fwd", status="ok",
                     samples_s=(seconds,) * 3, stats={"median": seconds},
                     memory={"peak_extra_bytes": 1024, "output_bytes": 4 * case.heads * case.tq * case.d})


def test_the_report_sweeps_along_the_axes_bench_fits() -> None:
    assert set(slices.AXES) == set(AXES)
    for name, axis in AXES.items():
        assert sweepfits.TIME_THEORY[name] == axis.time_theory
        assert slices.AXES[name] == ("window_width" if name == "window" else axis.size)
    assert AXES["T"].time_theory == 2.0 and AXES["d"].time_theory == 1.0 and AXES["Tk"].fields == ("tk",)


@pytest.mark.parametrize(("tq", "tk", "heads", "kv_heads", "on"), [
    (512, 512, 8, 8, {"T", "d", "heads", "window"}),
    (1, 4096, 8, 8, {"Tk", "d", "heads", "window"}),  # a decode step: along Tk, never along T
    (512, 512, 8, 2, {"T", "d", "window"}),  # grouped-query heads: not a point of a heads sweep
])
def test_which_cases_lie_on_each_axis(tq: int, tk: int, heads: int, kv_heads: int, on: set[str]) -> None:
    assert {name for name, axis in AXES.items() if axis.holds(tq, tk, heads, kv_heads)} == on


def test_bench_and_the_report_leave_grouped_query_cells_out_of_a_heads_sweep() -> None:
    mha = [AttentionCase(heads=h, tq=256, d=64) for h in (2, 4, 8)]
    gqa = [AttentionCase(heads=h, kv_heads=1, tq=256, d=64) for h in (2, 4, 8)]
    cells = [_cell(c, 1e-6 * c.heads) for c in mha] + [_cell(c, 1e-6 * c.heads ** 3) for c in gqa]
    heads = [r for f in sweepfits.cell_fits(cells) for r in f.rows if r.axis == "heads"]
    assert len(heads) == 1 and heads[0].slope == pytest.approx(1.0, abs=0.01)  # the MHA cells only
    frame = pd.DataFrame([bench_row(c, "run", None) for c in cells], columns=list(BENCH_COLUMNS))
    found = slices.sweep(frame, "heads")
    assert found is not None and set(found.frame["kv_heads"]) == set(found.frame["heads"])


def test_a_cell_read_from_a_file_gives_the_typed_case_it_timed(tmp_path: Path) -> None:
    windowed = [AttentionCase(heads=2, tq=t, d=16, causal=True, window=(8, 0)) for t in (64, 128)]
    packed = AttentionCase(heads=2, tq=64, d=16, varlen=((24, 24), (40, 40)))
    run = Run(run_id="r", command="bench", complete=True, environment=Environment(), config=Config(),
              cells=(*(_cell(c, 1e-9 * work_g(c)) for c in windowed), _cell(packed, 2e-4)))
    path = tmp_path / "run.json"
    write_json_atomic(path, run.to_json())
    read = read_run(path).bench_cells()
    assert [c.attention_case for c in read] == [*windowed, packed]
    assert read[0].attention_case is read[0].attention_case  # built once
    # a window sweep's size is the typed window's width (left + right), never parsed from its "left,right" label
    assert [point_columns(c)["window_width"] for c in read] == [8, 8, None]
    assert [point_columns(c)["window"] for c in read] == ["8,0", "8,0", None]


def test_a_case_that_is_not_a_kernels_attention_case_has_no_typed_case() -> None:
    module = BenchCell(implementation="m", case={"kind": "module", "batch": 1, "tq": 8}, case_id="m", mode="fwd",
                       status="ok")
    invalid = BenchCell(implementation="i", case={"tq": 64, "d": 16, "heads": 3, "kv_heads": 2}, case_id="i",
                        mode="fwd", status="ok")
    assert module.attention_case is None and invalid.attention_case is None
    assert invalid.case.to_json() == {"tq": 64, "d": 16, "heads": 3, "kv_heads": 2}  # stored form untouched
