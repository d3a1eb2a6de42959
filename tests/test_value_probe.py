"""The value probe: a cell's case timed again under other distributions of its input values.

The verdict is a pure function of the stored samples, checked here on synthetic samples (flat, shifted, noisy);
the distributions are checked on real arrays; the schema takes the new field and an older file without it still
reads and reports; and a small bench run says that a kernel with a zero-query shortcut is data-dependent.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from harness.analysis.values import (
    DEPENDENT,
    INDEPENDENT,
    NOISE_BAND,
    UNDECIDED,
    dependent,
    shifts,
    value_findings,
    verdict_line,
)
from harness.bench.sweeps import PlannedCell
from harness.bench.values import (
    PROBE_ROUNDS,
    PROBE_TARGET_S,
    SPARSE_BLOCK,
    ProbePicker,
    _equal_logits,
    _large,
    _one_hot_keys,
    _zeros,
    block_sparse,
)
from harness.case.attention import AttentionCase
from harness.results import BenchCell, Stats, ValueProbe, read_run
from harness.results.cells import cell_from_json, cell_to_json
from harness.results.validate import Damaged, check_cell

ROOT = Path(__file__).resolve().parent
PLUGIN = ROOT / "integrity" / "value_dependent.py"
V1 = ROOT / "data" / "schema_v1" / "main-job-bench.json"
FAST = ["--roof-budget", "0.01", "--budget", "0.05", "--min-samples", "3", "--threads", "1", "--no-memory", "--quiet"]


def _probe(times: dict[str, list[float]], calls: int = 1) -> ValueProbe:
    rounds = len(next(iter(times.values()))) // calls
    return ValueProbe(clock="cpu", round_sizes=(calls,) * rounds, samples_s={k: tuple(v) for k, v in times.items()})


def _jitter(base: float, n: int, spread: float, seed: int) -> list[float]:
    rng = random.Random(seed)
    return [base * (1 + rng.uniform(-spread, spread)) for _ in range(n)]


# ---------------------------------------------------------------- the verdict, on synthetic samples


def test_flat_samples_are_no_finding() -> None:
    probe = _probe({"normal": _jitter(1e-3, 7, 0.03, 1), "zeros": _jitter(1e-3, 7, 0.03, 2),
                    "large": _jitter(1e-3, 7, 0.03, 3)})
    assert [s.verdict for s in shifts(probe)] == [INDEPENDENT, INDEPENDENT]
    assert not dependent(probe)
    assert verdict_line(probe).startswith("no value dependence beyond noise")


def test_a_clear_shift_is_a_finding_with_its_ratio_and_interval() -> None:
    probe = _probe({"normal": _jitter(1e-3, 7, 0.05, 1), "zeros": _jitter(0.4e-3, 7, 0.05, 2),
                    "equal_logits": _jitter(1e-3, 7, 0.05, 3)})
    (found,) = dependent(probe)
    assert found.distribution == "zeros" and found.verdict == DEPENDENT
    assert 0.3 < found.low <= found.ratio <= found.high < 0.5 and found.coverage >= 0.95
    assert verdict_line(probe).startswith("data-dependent: zeros 0.")
    slower = _probe({"normal": [1e-3] * 7, "large": [1.5e-3] * 7})
    assert [s.verdict for s in shifts(slower)] == [DEPENDENT]  # slower counts as much as faster


def test_noisy_samples_whose_interval_overlaps_the_band_are_undecided_not_a_finding() -> None:
    # a median ratio of 1.3, but two rounds of the seven inside the band: the interval reaches into it
    normal = [1e-3] * 7
    zeros = [1.3e-3, 1.35e-3, 1.02e-3, 1.4e-3, 1.25e-3, 1.05e-3, 1.3e-3]
    (shift,) = shifts(_probe({"normal": normal, "zeros": zeros}))
    assert shift.ratio > 1 + NOISE_BAND and shift.low < 1 + NOISE_BAND and shift.verdict == UNDECIDED
    assert not dependent(_probe({"normal": normal, "zeros": zeros}))
    assert "undecided: zeros" in verdict_line(_probe({"normal": normal, "zeros": zeros}))


def test_too_few_rounds_never_make_a_finding() -> None:
    """Five rounds cover the median 93.8% at most: below the rule's 95%, however far the shift; seven rounds cover
    98.4%, enough for one distribution but not for five sharing the 95% (99% each)."""
    probe = _probe({"normal": [1e-3] * 5, "zeros": [0.1e-3] * 5})
    (shift,) = shifts(probe)
    assert shift.coverage < 0.95 and shift.verdict == UNDECIDED
    five = _probe({"normal": [1e-3] * 7, **{n: [0.1e-3] * 7 for n in ("zeros", "large", "equal_logits", "one_hot_keys",
                                                                        "sparse_mask")}})
    assert {s.verdict for s in shifts(five)} == {UNDECIDED}
    eight = _probe({"normal": [1e-3] * PROBE_ROUNDS, **{n: [0.1e-3] * PROBE_ROUNDS for n in ("zeros", "large")}})
    assert {s.verdict for s in shifts(eight)} == {DEPENDENT}


def test_rounds_that_disagree_are_undecided_however_far_the_median() -> None:
    """Every round faster, but by 0.1x in one and 0.8x in another: the machine, not the values, decides that. A huge
    shift may scatter more (a shortcut of microseconds is noisier than the call it replaces) and still be found."""
    zeros = [0.1e-3, 0.8e-3, 0.3e-3, 0.5e-3, 0.2e-3, 0.7e-3, 0.4e-3, 0.6e-3]
    (shift,) = shifts(_probe({"normal": [1e-3] * 8, "zeros": zeros}))
    assert shift.high < 1 / (1 + NOISE_BAND) and shift.verdict == UNDECIDED
    shortcut = [0.02e-3, 0.05e-3, 0.03e-3, 0.02e-3, 0.04e-3, 0.03e-3, 0.02e-3, 0.03e-3]
    assert [s.verdict for s in shifts(_probe({"normal": [1e-3] * 8, "zeros": shortcut}))] == [DEPENDENT]


def test_rounds_are_paired_so_a_load_that_hits_a_round_cancels() -> None:
    """Each round's load slows both sides alike (by up to 3x): the per-round ratio stays at 1."""
    load = [1.0, 3.0, 1.2, 2.5, 1.0, 1.8, 2.2]
    probe = _probe({"normal": [1e-3 * x for x in load for _ in range(2)],
                    "zeros": [1.01e-3 * x for x in load for _ in range(2)]}, calls=2)
    assert [s.verdict for s in shifts(probe)] == [INDEPENDENT]


def test_findings_over_cells_and_a_failed_probe() -> None:
    case = AttentionCase(batch=1, heads=1, tq=8, d=4)
    cells = [BenchCell("a", case, case.id, "fwd", "ok", samples_s=(1e-3,),
                       value_probe=_probe({"normal": [1e-3] * 7, "zeros": [0.1e-3] * 7})),
             BenchCell("b", case, case.id, "fwd", "ok", samples_s=(1e-3,),
                       value_probe=_probe({"normal": [1e-3] * 7, "zeros": [1e-3] * 7})),
             BenchCell("c", case, case.id, "fwd", "ok", samples_s=(1e-3,), value_probe=ValueProbe(error="crash: killed")),
             BenchCell("d", case, case.id, "fwd", "ok", samples_s=(1e-3,))]
    values = value_findings(cells)
    assert values.probed == 2 and values.failed == 1 and [f.implementation for f in values.findings] == ["a"]
    assert "1 of 2 probed cell(s)" in values.note and "a B1-H1-T8-d4-float32 fwd: data-dependent: zeros 0.10x" in values.note
    assert verdict_line(ValueProbe(error="crash: killed")) == "not probed: crash: killed"
    assert value_findings(cells[1:2]).note.startswith("no value dependence beyond noise")
    assert value_findings(cells[3:]).note == ""


# ---------------------------------------------------------------- the distributions, on real arrays


@pytest.mark.parametrize("backend", ["torch", "numpy"])
def test_each_distribution_is_what_it_says(backend: str) -> None:
    case = AttentionCase(batch=1, heads=2, tq=64, d=16)
    gen = np.random.Generator(np.random.SFC64(0))

    def fresh() -> dict[str, Any]:
        drawn = {n: torch.randn(1, 2, 64, 16, dtype=torch.float32) for n in "qkv"}
        return drawn if backend == "torch" else {n: x.numpy() for n, x in drawn.items()}

    def f64(x: Any) -> torch.Tensor:
        return torch.as_tensor(np.asarray(x), dtype=torch.float64)

    arrays = fresh()
    _equal_logits(arrays, case, gen)
    logits = f64(arrays["q"]) @ f64(arrays["k"]).transpose(-1, -2)
    assert torch.allclose(logits, logits[..., :1].expand_as(logits))  # every row of QK^T constant
    arrays = fresh()
    _large(arrays, case, gen)
    logits = case.effective_scale * f64(arrays["q"]) @ f64(arrays["k"]).transpose(-1, -2)
    assert 5 < float(logits.std()) < 10 and float(logits.abs().max()) < 60
    arrays = fresh()
    _one_hot_keys(arrays, case, gen)
    keys = f64(arrays["k"])
    assert torch.equal((keys != 0).sum(-1), torch.ones(1, 2, 64, dtype=torch.long))
    assert torch.allclose(keys.abs().sum(-1), torch.full((1, 2, 64), 16 ** 0.5, dtype=torch.float64))
    arrays = fresh()
    v = f64(arrays["v"]).clone()
    _zeros(arrays, case, gen)
    assert not f64(arrays["q"]).any() and not f64(arrays["k"]).any() and torch.equal(f64(arrays["v"]), v)


def test_the_sparse_mask_is_block_sparse_and_empties_no_row() -> None:
    gen = np.random.Generator(np.random.SFC64(0))
    mask = block_sparse((2, 3, 300, 1000), gen)
    assert mask.shape == (2, 3, 300, 1000) and mask.dtype == np.bool_
    assert mask[..., :SPARSE_BLOCK].all() and mask.any(-1).all()  # the first key block: every row keeps a key
    assert 0.05 < mask[..., SPARSE_BLOCK:].mean() < 0.2
    tiles = mask[..., :SPARSE_BLOCK * 4, :SPARSE_BLOCK * 15].reshape(2, 3, 4, SPARSE_BLOCK, 15, SPARSE_BLOCK)
    assert (tiles.all(axis=(3, 5)) | ~tiles.any(axis=(3, 5))).all()  # whole tiles, allowed or masked
    assert block_sparse((2, 1, 1, 200), gen).shape == (2, 1, 1, 200)  # a key-padding mask's broadcast shape


def test_the_probe_task_times_each_distribution_in_rounds() -> None:
    """The worker's task on a real built-in: a case with a boolean mask gets the sparse mask, one without says why."""
    from harness.bench.timing import TimingConfig
    from harness.bench.values import value_probe_task
    from harness.contract.discovery import load_registry

    source = load_registry().sources["numpy_naive"]
    for case, sparse in ((AttentionCase(batch=1, heads=1, tq=32, d=8, mask="random"), True),
                         (AttentionCase(batch=1, heads=1, tq=32, d=8), False)):
        probe = value_probe_task("numpy_naive", source, case.to_dict(), "fwd", TimingConfig(budget_s=0.01), 1)
        assert probe.error is None and probe.round_sizes and len(probe.round_sizes) == PROBE_ROUNDS
        expected = {"normal", "equal_logits", "large", "one_hot_keys", "zeros"} | ({"sparse_mask"} if sparse else set())
        assert set(probe.samples_s or {}) == expected
        assert all(len(v) == sum(probe.round_sizes) for v in (probe.samples_s or {}).values())
        assert (probe.not_run is None) == sparse


# ---------------------------------------------------------------- which cells are probed


def _planned(name: str, t: int, mode: str = "fwd") -> PlannedCell:
    return PlannedCell(name, AttentionCase(batch=1, heads=1, tq=t, d=16), mode)


def _measured(planned: PlannedCell, median: float, status: str = "ok") -> BenchCell:
    return BenchCell(planned.implementation, planned.case, planned.case.id, planned.mode, status,
                     samples_s=(median,), stats=Stats(median=median))


def test_one_probes_the_first_cell_past_the_target_else_the_last() -> None:
    order = [_planned("a", t) for t in (64, 128, 256)] + [_planned("b", t) for t in (64, 128)]
    picker = ProbePicker("one", order, lambda cell: True)
    wanted = [picker.wants(_measured(c, m)) for c, m in
              zip(order, (PROBE_TARGET_S / 10, PROBE_TARGET_S * 2, PROBE_TARGET_S * 4, 1e-5, 2e-5))]
    assert wanted == [False, True, False, False, True]  # a: the first past 10 ms; b: none reaches it, its last


def test_all_off_and_a_resumed_run() -> None:
    order = [_planned("a", t) for t in (64, 128)]
    assert all(ProbePicker("all", order, lambda cell: True).wants(_measured(c, 1e-5)) for c in order)
    assert not any(ProbePicker("off", order, lambda cell: True).wants(_measured(c, 1.0)) for c in order)
    assert not ProbePicker("all", order, lambda cell: False).wants(_measured(order[0], 1.0))  # not probeable
    assert not ProbePicker("all", order, lambda cell: True).wants(_measured(order[0], 1.0, "error"))
    done = [BenchCell("a", order[0].case, order[0].case.id, "fwd", "ok", samples_s=(1.0,),
                      value_probe=ValueProbe(error="x"))]
    assert not ProbePicker("one", order[1:], lambda cell: True, done).wants(_measured(order[1], 1.0))


# ---------------------------------------------------------------- the result file


def test_the_field_is_stored_raw_validated_and_read_back() -> None:
    case = AttentionCase(batch=1, heads=1, tq=8, d=4)
    probe = _probe({"normal": [1e-3] * PROBE_ROUNDS, "zeros": [0.5e-3] * PROBE_ROUNDS})
    probe = ValueProbe(clock="cpu", round_sizes=probe.round_sizes, samples_s=probe.samples_s,
                       not_run={"sparse_mask": "the case passes no boolean mask"})
    cell = BenchCell("a", case, case.id, "fwd", "ok", samples_s=(1e-3,), value_probe=probe)
    stored = json.loads(json.dumps(cell_to_json(cell)))
    assert set(stored["value_probe"]) == {"clock", "round_sizes", "samples_s", "not_run"}  # no verdict stored
    check_cell(stored, "cells[0]")
    again = cell_from_json(stored)
    assert again == cell and again.value_probe is not None and again.value_probe == probe
    assert cell_to_json(again) == stored
    for bad in (-1.0, float("nan"), "fast"):
        damaged = json.loads(json.dumps(stored))
        damaged["value_probe"]["samples_s"]["zeros"][2] = bad
        with pytest.raises(Damaged, match=r"value_probe\.samples_s\.zeros\[2\]"):
            check_cell(damaged, "cells[0]")


def test_an_older_file_without_the_field_reads_and_reports(tmp_path: Path) -> None:
    from harness.report.builder import build_report
    from harness.report.settings import ReportSettings

    run = read_run(V1)
    assert all(c.value_probe is None for c in run.bench_cells())
    assert "value_probe" not in json.dumps(run.to_json())
    assert value_findings(run.bench_cells()).note == ""
    build_report(ReportSettings((V1,), tmp_path / "report"))
    summary = (tmp_path / "report" / "summary.md").read_text()
    assert summary.startswith("# attnbench report") and "## Values" not in summary


def test_resume_takes_the_setting_and_refuses_a_bad_one(tmp_path: Path) -> None:
    from harness.bench.resume import stored_settings
    from harness.errors import UsageError

    assert stored_settings(tmp_path / "r.json", {"value_probe": "all"}).value_probe == "all"
    assert stored_settings(tmp_path / "r.json", {}).value_probe == "one"  # an older file: the default
    with pytest.raises(UsageError, match="value_probe"):
        stored_settings(tmp_path / "r.json", {"value_probe": "some"})


# ---------------------------------------------------------------- a real bench run


@pytest.mark.slow
def test_a_kernel_with_a_zero_shortcut_is_reported_data_dependent(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The shortcut takes well under a twentieth of the dense call's time: the verdict holds on any machine and load."""
    from harness.cli import main
    from harness.report.builder import build_report
    from harness.report.settings import ReportSettings

    path = tmp_path / "run.json"
    assert main(["bench", "--plugin", str(PLUGIN), "--only", "zero_shortcut", "--T", "256", "--heads", "2", "--d", "64",
                 "--mode", "fwd", "--out", str(path), *FAST]) == 0
    printed = capsys.readouterr().out
    assert "value probe: 1 of 1 probed cell(s)" in printed and "zeros" in printed
    (cell,) = read_run(path).bench_cells()
    assert cell.status == "ok" and cell.value_probe is not None
    (found,) = dependent(cell.value_probe)
    assert found.distribution == "zeros" and found.high < 0.5
    stored = json.loads(path.read_text())["config"]
    assert stored["value_probe"] == "one"
    build_report(ReportSettings((path,), tmp_path / "report"))
    summary = (tmp_path / "report" / "summary.md").read_text()
    assert "## Values" in summary and "| zero_shortcut |" in summary and "| zeros |" in summary
    assert 'id="values"' in (tmp_path / "report" / "index.html").read_text()


@pytest.mark.slow
def test_the_probe_can_be_turned_off(tmp_path: Path) -> None:
    from harness.cli import main

    path = tmp_path / "run.json"
    assert main(["bench", "--only", "numpy_naive", "--T", "64", "--heads", "1", "--d", "16", "--mode", "fwd",
                 "--value-probe", "off", "--out", str(path), *FAST]) == 0
    data = json.loads(path.read_text())
    assert data["config"]["value_probe"] == "off" and all("value_probe" not in c for c in data["cells"])
