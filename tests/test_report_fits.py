"""The report's cost-model fits: planted complexity problems are flagged, honest kernels are not.

Bench cells are written through the result schema with the costs the kernels would have (raw
samples with 2% noise, as bench records them); no timing is involved. Honest kernels include
the shapes that fooled a single power law: a d sweep at fixed T that the O(T^2) softmax and
fixed costs dominate, and a fast kernel whose per-call overhead flattens the short end of T.
"""

from __future__ import annotations

import copy
import json
import math
import random
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from test_report_data import bench_cases, write_bench_run

from harness.analysis.costmodel import falls, fit_cost
from harness.analysis.growth import MAX_INTERVAL_WIDTH, Row
from harness.analysis.stats import summarize
from harness.analysis.sweepfits import cell_fits
from harness.case.attention import AttentionCase
from harness.report.findings import analyse
from harness.report.load import load
from harness.report.terminal import fits_table
from harness.results import BenchCell, ResultWriter, read_run

pytestmark = pytest.mark.tier  # results depend on the CPU's tier: CI runs it again capped (scripts/at_tier.py)

Cost = Callable[[AttentionCase], float]


def _work(c: AttentionCase) -> float:
    return float(c.batch * c.heads * c.tq * c.tk)


KERNELS: dict[str, tuple[str, Cost, Cost]] = {
    # name: (declared memory, seconds, extra bytes at the peak)
    "honest_gemm": ("quadratic", lambda c: 20e-6 + 1e-10 * _work(c) * c.d, lambda c: 12 * c.heads * c.tq * c.tk),
    # the softmax's O(T^2) work (constant in d) is most of the time at T = 512: time in d looks flat
    "honest_softmax_bound": ("quadratic", lambda c: 50e-6 + 4e-9 * _work(c) + 2e-11 * _work(c) * c.d,
                             lambda c: 12 * c.heads * c.tq * c.tk),
    # a fast tiled kernel: per-call and per-row costs flatten the short end of T
    "honest_overhead": ("linear", lambda c: 2e-3 + 2e-7 * c.heads * c.tq + 1e-11 * _work(c) * c.d,
                        lambda c: 256 * 1024),
    # the machine was busy while its smallest T ran: 6x slow there, so time falls from T=128 to T=256
    "honest_disturbed": ("quadratic", lambda c: (20e-6 + 1e-10 * _work(c) * c.d) * (6.0 if c.tq == 128 else 1.0),
                         lambda c: 12 * c.heads * c.tq * c.tk),
    "planted_cubic": ("linear", lambda c: 20e-6 + 3e-13 * _work(c) * c.tq * c.d / 64, lambda c: 64 * 1024),
    "planted_fake_linear": ("linear", lambda c: 20e-6 + 1e-10 * _work(c) * c.d, lambda c: 4 * c.heads * c.tq * c.tk),
    "planted_d_squared": ("linear", lambda c: 20e-6 + 2e-12 * _work(c) * c.d * c.d, lambda c: 64 * 1024),
}


def _cell(name: str, case: AttentionCase, rng: random.Random) -> BenchCell:
    _, seconds, extra = KERNELS[name]
    median = seconds(case)
    samples = [median * (1 + rng.gauss(0, 0.02)) for _ in range(9)]
    return BenchCell(implementation=name, case=case.to_dict(), case_id=case.id, mode="fwd", status="ok",
                     samples_s=tuple(samples), stats=summarize(samples), threads=2,
                     memory={"peak_extra_bytes": int(extra(case)), "method": "synthetic",
                             "output_bytes": 4 * case.batch * case.heads * case.tq * case.d})  # as bench records it


@pytest.fixture(scope="module")
def analysis(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    path = tmp_path_factory.mktemp("fits") / "bench.json"
    writer = ResultWriter(path, "bench", {"suite": "synthetic"})
    writer.set("implementations", {name: {"memory": memory} for name, (memory, _, _) in KERNELS.items()})
    rng = random.Random(7)
    for name in KERNELS:
        for case in bench_cases():
            writer.append(_cell(name, case, rng))
    writer.finish()
    return analyse(load([path]), baseline="honest_gemm")


def test_exactly_the_planted_problems_are_flagged(analysis) -> None:  # type: ignore[no-untyped-def]
    flagged = {(r.implementation, r.quantity, r.axis) for r in analysis.flagged}
    assert flagged == {("planted_cubic", "time", "T"), ("planted_fake_linear", "memory", "T"),
                       ("planted_d_squared", "time", "d")}
    rows = {(r.implementation, r.quantity, r.axis): r for r in analysis.rows}
    assert rows[("planted_cubic", "time", "T")].slope == pytest.approx(3.0, abs=0.15)
    assert rows[("planted_d_squared", "time", "d")].slope == pytest.approx(2.0, abs=0.15)
    assert rows[("planted_fake_linear", "memory", "T")].slope == pytest.approx(2.0, abs=0.15)
    for key in flagged:
        fit = rows[key].fit
        assert fit is not None and fit.reached and not fit.contains(rows[key].theory or 0) and rows[key].check == "OFF"


def test_lower_order_terms_keep_honest_kernels_on_theory(analysis) -> None:  # type: ignore[no-untyped-def]
    rows = {(r.implementation, r.quantity, r.axis): r for r in analysis.rows}
    softmax_d = rows[("honest_softmax_bound", "time", "d")]
    assert softmax_d.fit is not None and softmax_d.fit.regimes == ("fixed", "fixed", "fixed")  # the softmax term
    assert softmax_d.check == "leading term not reached" and not softmax_d.flagged
    overhead_t = rows[("honest_overhead", "time", "T")]
    disturbed = rows[("honest_disturbed", "time", "T")]  # the spike would pass for a fixed cost and steepen p
    assert disturbed.check.startswith("time falls ×0.") and "from 128 to 256: not judged" in disturbed.check
    # on theory and never flagged; but the fixed cost leaves the leading term two sizes, and an interval that wide
    # (over MAX_INTERVAL_WIDTH) cannot tell T^2 from T^3: undecided, not "ok"
    assert overhead_t.fit is not None and overhead_t.fit.contains(2.0) and not overhead_t.flagged
    assert overhead_t.fit.high - overhead_t.fit.low > MAX_INTERVAL_WIDTH
    assert overhead_t.check.startswith("undecided: interval [") and overhead_t.check.endswith("wider than 1")
    assert overhead_t.fit.regimes[0] == "fixed" and overhead_t.fit.regimes[-1] == "lead"
    for name in ("honest_gemm", "honest_softmax_bound"):
        for axis in ("T", "heads"):
            assert rows[(name, "time", axis)].check == "ok", rows[(name, "time", axis)]


def test_the_analysis_fits_each_sweep_once_and_renderers_reuse_it(analysis, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from harness.report import html, markdown

    assert len(analysis.rows) == len({(r.implementation, r.quantity, r.axis, r.sweep) for r in analysis.rows})
    page = html.render(analysis, "fits", [])
    summary = markdown.render(analysis, "fits", [])
    assert "leading term not reached" in page and "dominates at" in summary
    assert summary.count("⚠️ off") == 3 and "3 exponent(s) flagged" in summary


def test_fit_cost_recovers_the_leading_exponent_beside_lower_terms() -> None:
    rng = np.random.default_rng(3)
    xs = [256, 512, 1024, 2048, 4096]
    samples = [[(1e-3 + 1e-6 * x + 1e-9 * x * x) * (1 + rng.normal(0, 0.02)) for _ in range(9)] for x in xs]
    fit = fit_cost(xs, [float(np.median(s)) for s in samples], samples, theory=2)
    assert fit.lower_terms == (0, 1) and fit.contains(2.0) and fit.high - fit.low < 1.0
    assert fit.regimes[0] != "lead" and fit.regimes[-1] == "lead"
    assert fit.predict([4096])[0] == pytest.approx(1e-3 + 1e-6 * 4096 + 1e-9 * 4096**2, rel=0.05)
    flat = fit_cost([1, 2, 4, 8], [5.0] * 4, theory=1)  # nothing grows: the leading term is absent
    assert flat.exponent == 0 and not flat.reached and "leading term not reached" in flat.describe()
    with pytest.raises(ValueError):
        fit_cost([1, 2, 3], [1.0, 0.0, 2.0])
    assert falls([1.0, 2.0, 1.5, 3.0]) == pytest.approx(math.log(2.0 / 1.5)) and falls([1.0, 2.0, 4.0]) == 0


def _rows(path: Path) -> list[Row]:
    """The fits bench prints for the run in ``path`` (:func:`harness.analysis.sweepfits.cell_fits`), in its order."""
    run = read_run(path)
    return [r for f in cell_fits(run.cells, run.implementations) for r in f.rows]


def test_a_report_s_fits_are_the_fits_bench_prints(tmp_path: Path) -> None:
    """One model of the sweeps, derived from the cells: bench's printed table and the report's fits agree."""
    path = write_bench_run(tmp_path / "bench.json")
    printed = _rows(path)
    fits = analyse(load([path]), "torch_sdpa").fits
    assert printed and [r for f in fits for r in f.rows] == printed
    table = fits_table(printed)
    assert len(table.strip().splitlines()) == len(printed) + 2  # header, rule, one line a fit
    assert all(row.fit is not None and row.fit.describe() in table for row in printed)


def test_an_older_file_s_stored_fits_are_read_past(tmp_path: Path) -> None:
    """Older bench runs stored their fits: the file still loads, and its fits are derived from its cells."""
    path = write_bench_run(tmp_path / "bench.json")
    data = json.loads(path.read_text())
    data["fits"] = [{"model": "drift", "key": "k", "drift": 0.25},
                    {"model": "cost", "key": "k", "sweep": "time_vs_T", "implementation": "tiled", "row": {}}]
    older = tmp_path / "older.json"
    older.write_text(json.dumps(data))
    fits = analyse(load([older]), "torch_sdpa").fits
    assert [r for f in fits for r in f.rows] == _rows(path) and all(f.drift != 0.25 for f in fits)


def test_a_cell_measured_again_is_fitted_as_measured_last(tmp_path: Path) -> None:
    """A later cell of the same key replaces the earlier one, in bench's printed fits and the report's alike."""
    path = write_bench_run(tmp_path / "bench.json")
    data = json.loads(path.read_text())
    cell = copy.deepcopy(next(c for c in data["cells"] if c["implementation"] == "tiled" and c["case"]["tq"] == 2048))
    cell["stats"]["median"] *= 1.5
    data["cells"].append(cell)
    again = tmp_path / "again.json"
    again.write_text(json.dumps(data))
    rows = {(r.implementation, r.axis, r.quantity): r for r in analyse(load([again]), "torch_sdpa").rows}
    before = {(r.implementation, r.axis, r.quantity): r for r in analyse(load([path]), "torch_sdpa").rows}
    assert rows[("tiled", "T", "time")].slope != before[("tiled", "T", "time")].slope
    assert sorted(rows.values(), key=repr) == sorted(_rows(again), key=repr)


def test_a_cell_measured_again_counts_once(tmp_path: Path) -> None:
    """The typed cells behind the tables: a later file's cell replaces an earlier one's, in the noise count too."""
    first = write_bench_run(tmp_path / "a.json", seed=1)
    again = write_bench_run(tmp_path / "b.json", seed=2, names=("tiled",))
    results = load([first, again])
    ok = results.bench[results.bench["status"] == "ok"]
    assert analyse(results, "torch_sdpa").noise.timed == len(ok) == len(load([first]).bench.query("status == 'ok'"))
    assert [(c.implementation, c.case_id) for c in results.bench_cells] == list(zip(results.bench["implementation"],
                                                                                  results.bench["case_id"]))
