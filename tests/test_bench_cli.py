"""`attnbench bench` end to end: a valid result file, resume after an interruption, crashes recorded."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from harness.analysis.sweepfits import cell_fits
from harness.case.attention import AttentionCase
from harness.cli import main
from harness.reference.flops import attention_flops
from harness.results import Run, load_results, read_run
from harness.results.schema import cell_from_json

pytestmark = pytest.mark.slow  # compiles, CLI subprocesses or whole verify runs: not in the inner loop

FAST = ["--roof-budget", "0.01", "--budget", "0.05", "--min-samples", "3", "--threads", "1", "--quiet"]


@pytest.fixture(scope="module")
def run_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("bench") / "run.json"
    code = main(["bench", "--T", "256", "512", "1024", "--heads", "4", "--d", "64", "--mode", "fwd", "fwd+bwd",
                 "--only", "numpy_naive,torch_sdpa", "--out", str(path), *FAST])
    assert code == 0
    return path


def test_result_file_is_complete_and_cells_are_consistent(run_file: Path) -> None:
    data = load_results(run_file)
    assert data["complete"] and data["command"] == "bench"
    assert {"cpu_model", "cores", "threads", "torch", "numpy", "git_commit", "command_line"} <= set(data["environment"])
    peak = data["peaks"]["float32/cpu"]
    assert peak["gflops"] > 0 and peak["threads"] == 1
    assert peak["gflops"] == max(peak["first_gflops"], peak["confirmed_gflops"])
    assert peak["fastest_call_gflops"] >= peak["gflops"]  # named for what it is: never below the median rate
    cells = {(c["implementation"], c["case_id"], c["mode"]): c for c in data["cells"]}
    assert len(cells) == 12
    skipped = cells[("numpy_naive", "B1-H4-T512-d64-float32", "fwd+bwd")]
    assert skipped["status"] == "skipped" and "gradients not supported" in skipped["reason"]
    ok = [c for c in data["cells"] if c["status"] == "ok"]
    assert len(ok) == 9  # numpy fwd x3, sdpa fwd x3, sdpa fwd+bwd x3
    for cell in ok:
        case = AttentionCase.from_dict(cell["case"])
        assert cell["flops"] == attention_flops(case, cell["mode"])
        assert len(cell["samples_s"]) == cell["stats"]["n"] >= 3
        assert math.isclose(cell["gflops"], cell["flops"] / cell["stats"]["median"] / 1e9)
        assert "pct_peak" not in cell  # cells are append-only: the % of the confirmed peak is computed on reading
        typed = cell_from_json(cell)
        assert math.isclose(Run.from_json(data).pct_peak(typed), 100 * cell["gflops"] / peak["gflops"])
        assert cell["threads"] == 1 and cell["memory"]["peak_extra_bytes"] is not None
        assert cell["setup_s"] > 0  # inputs and set-up, in the timing worker, outside the samples


def test_fits_on_a_real_run_fall_in_wide_bands(run_file: Path) -> None:
    data = load_results(run_file)
    assert "fits" not in data  # fits are derived from the cells when the file is read, never stored
    run = read_run(run_file)
    by = {(r.implementation, r.quantity, r.axis): r for f in cell_fits(run.cells, run.implementations) for r in f.rows
          if "fwd" in r.sweep.split(", ")}
    # Times on a shared machine follow its load, so their exponents are not asserted: only that each
    # time fit is the fit of the medians the file holds (the report and compare recompute nothing else).
    for name in ("numpy_naive", "torch_sdpa"):
        cells = [c for c in data["cells"] if c["implementation"] == name and c["mode"] == "fwd" and c["status"] == "ok"]
        fit = by[(name, "time", "T")].fit
        assert fit is not None and list(fit.xs) == [c["case"]["tq"] for c in cells]
        assert list(fit.ys) == [c["stats"]["median"] for c in cells]
    # Memory is deterministic: the naive kernel holds T x T buffers.
    assert 1.8 <= (by[("numpy_naive", "memory", "T")].slope or 0.0) <= 2.2


def test_the_report_fits_what_bench_printed(run_file: Path) -> None:
    """Bench prints the fits of its cells; the report of that file derives the same fits from the same cells."""
    from harness.report.findings import analyse
    from harness.report.load import load

    run = read_run(run_file)
    printed = cell_fits(run.cells, run.implementations)
    fits = analyse(load([run_file]), "torch_sdpa").fits
    assert printed and [r for f in fits for r in f.rows] == [r for f in printed for r in f.rows]
    assert [f.drift for f in fits] == [f.drift for f in printed]


def test_resume_finishes_an_interrupted_file_without_redoing_cells(run_file: Path, tmp_path: Path) -> None:
    data = json.loads(run_file.read_text())
    planned = {c["case_id"] for c in data["cells"]}
    kept = data["cells"][:5]
    data.update(cells=kept, complete=False)  # what an interrupted run leaves behind
    partial = tmp_path / "partial.json"
    partial.write_text(json.dumps(data))
    assert main(["bench", "--resume", str(partial), "--quiet"]) == 0
    resumed = load_results(partial)
    assert resumed["complete"] and len(resumed["cells"]) == 12
    assert resumed["cells"][:5] == kept  # measured cells kept as they were
    assert resumed["peaks"] == data["peaks"]  # the run's peak is not measured again
    assert {c["case_id"] for c in resumed["cells"]} == planned


PLUGIN = '''
import os
from harness import register

@register("crasher", backend="numpy")
def crasher(q, k, v, *, causal=False, mask=None, scale=None):
    os.abort()

@register("raiser", backend="numpy")
def raiser(q, k, v, *, causal=False, mask=None, scale=None):
    raise RuntimeError("boom: shapes disagree")
'''


def test_a_crashing_plugin_is_recorded_and_the_run_goes_on(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    plugin = tmp_path / "bad_plugin.py"
    plugin.write_text(PLUGIN)
    out = tmp_path / "crash.json"
    code = main(["bench", "--plugin", str(plugin), "--only", "crasher,raiser,numpy_naive", "--T", "64", "--heads", "1",
                 "--no-memory", "--out", str(out), *FAST])
    assert code == 1
    cells = {c["implementation"]: c for c in load_results(out)["cells"]}
    assert cells["crasher"]["status"] == "crash" and "SIGABRT" in cells["crasher"]["reason"]
    assert cells["raiser"]["status"] == "error" and "RuntimeError: boom" in cells["raiser"]["reason"]
    assert cells["numpy_naive"]["status"] == "ok"
    assert "crasher" in capsys.readouterr().err


def test_bad_input_is_a_usage_error(tmp_path: Path) -> None:
    assert main(["bench", "--only", "no_such_impl", "--out", str(tmp_path / "x.json"), "--quiet"]) == 2
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "--T", "12x"])
    assert exit_info.value.code == 2


# A real Ctrl-C mid-cell and --resume after it: tests/reliability/test_interrupts.py (the interrupt
# lands by construction there, at a gate the test controls, instead of racing the run's progress).


def test_a_relative_plugin_path_is_stored_absolute_so_resume_works_from_anywhere(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "plugin").mkdir()
    (tmp_path / "plugin" / "mine.py").write_text(
        "import torch\nfrom harness import register\n\n@register('mine', backend='torch')\n"
        "def mine(q, k, v, *, causal=False, mask=None, scale=None):\n"
        "    return torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=scale)\n")
    monkeypatch.chdir(tmp_path / "plugin")
    out = tmp_path / "run.json"
    assert main(["bench", "--plugin", "mine.py", "--only", "mine", "--T", "16", "--d", "8", "--heads", "1",
                 "--no-memory", *FAST, "--out", str(out)]) == 0
    stored = load_results(out)["config"]["plugins"]
    assert stored == [str(tmp_path / "plugin" / "mine.py")]
    monkeypatch.chdir(tmp_path)  # elsewhere: the stored path still loads the plugin
    data = load_results(out)
    data.update(cells=[], complete=False)
    out.write_text(json.dumps(data))
    assert main(["bench", "--resume", str(out), "--plugin", "plugin/mine.py", "--quiet"]) == 0
    assert [c["implementation"] for c in load_results(out)["cells"]] == ["mine"]


def test_no_profiler_lines_reach_the_console(tmp_path: Path, attnbench) -> None:
    """The audit profiles one call per cell; Kineto's "USDT: ... profiler_start" lines must not reach stderr."""
    done = attnbench("bench", "--only", "torch_sdpa", "--T", "64", "--heads", "2", "--d", "32", "--no-memory",
                     "--roof-budget", "0.01", "--budget", "0.02", "--min-samples", "2", "--threads", "1",
                     "--out", str(tmp_path / "b.json"))
    assert done.returncode == 0, done.stderr
    assert "USDT" not in done.stderr and "profiler_st" not in done.stderr, done.stderr
