"""Deterministic parts of `bench`: FLOP counts, statistics, scaling fits on synthetic data, sweeps."""

from __future__ import annotations

import math

import pytest

from harness.analysis.scaling import fit_exponent
from harness.analysis.stats import is_noisy, noise_cause, summarize
from harness.analysis.sweepfits import cell_fits
from harness.bench.sweeps import Budget, PlannedCell, plan, sweep_cases
from harness.case.attention import AttentionCase
from harness.errors import UsageError
from harness.reference.flops import attended_pairs, attention_flops
from harness.results import BenchCell

pytestmark = pytest.mark.tier  # results depend on the CPU's tier: CI runs it again capped (scripts/at_tier.py)


def test_forward_flops_are_two_matmuls() -> None:
    case = AttentionCase(batch=2, heads=8, tq=1024, d=64)
    assert attention_flops(case, "fwd") == 4 * 2 * 8 * 1024 * 1024 * 64
    assert attention_flops(case, "bwd") == 2.5 * attention_flops(case, "fwd")
    assert attention_flops(case, "fwd+bwd") == 3.5 * attention_flops(case, "fwd")
    cross = AttentionCase(batch=1, heads=2, tq=100, tk=300, d=16)
    assert attention_flops(cross) == 4 * 2 * 100 * 300 * 16


def test_causal_counts_only_the_unmasked_triangle() -> None:
    assert attended_pairs(4, 4, causal=True) == 1 + 2 + 3 + 4
    case = AttentionCase(heads=2, tq=512, d=32, causal=True)
    assert attention_flops(case) == 4 * 2 * (512 * 513 // 2) * 32
    brute = sum(1 for i in range(37) for j in range(37) if j <= i)
    assert attended_pairs(37, 37, causal=True) == brute


def test_unknown_mode_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown mode"):
        attention_flops(AttentionCase(), "backward")


def test_summarize_matches_hand_computed_values() -> None:
    stats = summarize([5.0, 1.0, 2.0, 3.0, 4.0])
    assert stats["median"] == 3.0 and stats["min"] == 1.0 and stats["mean"] == 3.0 and stats["n"] == 5
    assert stats["iqr"] == 2.0  # quartiles 2 and 4 (linear interpolation, as numpy.percentile)
    assert math.isclose(stats["stdev"], math.sqrt(2.5))
    assert math.isclose(stats["iqr_over_median"], 2 / 3)
    assert is_noisy(stats) and not is_noisy(summarize([1.0, 1.01, 0.99, 1.0]))
    assert summarize([0.5])["stdev"] == 0.0
    with pytest.raises(ValueError):
        summarize([])


def test_fit_recovers_exponent_and_reports_overhead_points() -> None:
    xs = [128, 256, 512, 1024, 2048, 4096]
    clean = fit_exponent(xs, [3e-9 * x ** 2 for x in xs])
    assert math.isclose(clean.slope, 2.0, abs_tol=1e-9) and math.isclose(clean.r2, 1.0) and not clean.excluded
    # 1 ms of fixed overhead swamps the quadratic term at the small sizes
    noisy = fit_exponent(xs, [1e-3 + 1e-8 * x ** 2 for x in xs])
    assert [x for x, _ in noisy.excluded] == [128, 256]
    assert 1.75 < noisy.slope < 2.0 and noisy.n == 4
    naive = fit_exponent(xs, [1e-3 + 1e-8 * x ** 2 for x in xs], drop_overhead=False)
    assert naive.slope < 1.6  # what the rule protects against
    flat = fit_exponent([1, 2, 4, 8], [5.0, 5.0, 5.0, 5.0])  # constant memory: nothing to leave out
    assert flat.slope == 0 and not flat.excluded
    with pytest.raises(ValueError, match="positive"):
        fit_exponent([1, 2, 3], [1.0, 0.0, 2.0])


def test_fit_takes_repeated_sizes_at_the_overhead_end() -> None:
    """Cells of equal work (H4 d64 and H8 d32 at one T) give equal x: once the smallest point is left
    out, the next two share their size. bench's cost prediction fits such history (it raised
    ZeroDivisionError, an internal error, when load made the small end look like overhead)."""
    xs = [64, 256, 256, 512, 1024]
    ys = [1.0, 1.05, 1.1, 2.0, 4.0]  # flat start: 64 is left out, then 256 and 256 are the smallest
    fit = fit_exponent(xs, ys)
    assert [x for x, _ in fit.excluded][:1] == [64] and 0.5 < fit.slope < 1.5
    assert fit_exponent([256, 256, 512, 512], [1.0, 1.0, 1.0, 1.0]).slope == 0  # only repeats left: no step


def _cell(t: int, median: float, memory: float | None) -> BenchCell:
    case = AttentionCase(heads=8, tq=t, d=64)
    return BenchCell(implementation="x", case=case.to_dict(), case_id=case.id, mode="fwd", status="ok",
                     stats={"median": median}, memory=None if memory is None else {"peak_extra_bytes": memory})


def test_one_cost_model_fit_per_sweep_the_cells_hold() -> None:
    cells = [_cell(t, 1e-9 * t * t, 12.0 * t * t) for t in (256, 512, 1024, 2048)]
    fits = {(r.quantity, r.axis): r for f in cell_fits(cells) for r in f.rows}
    assert fits[("time", "T")].slope == pytest.approx(2.0, abs=0.01)
    assert fits[("memory", "T")].slope == pytest.approx(2.0, abs=0.01)
    assert "T=" not in fits[("time", "T")].sweep and "H=8" in fits[("time", "T")].sweep and "d=64" in fits[("time", "T")].sweep
    assert set(fits) == {("time", "T"), ("memory", "T")}  # one d only: no d fit


def test_sweeps_axes_and_order() -> None:
    quick = sweep_cases("quick")
    decode = [c for c, _ in quick if c.tq < c.tk]  # the main job's two decode steps
    assert [(c.batch, c.heads, c.kv_heads, c.tq, c.tk) for c in decode] == [(4, 32, 8, 1, 2048), (1, 32, 8, 1, 8192)]
    quick = [(c, m) for c, m in quick if c.tq == c.tk]
    assert [c.tq for c, _ in quick if (c.d, c.heads) == (64, 8)] == [256, 512, 1024, 2048]
    assert {m for _, m in quick} == {"fwd"} and {c.tq for c, _ in quick if (c.d, c.heads) != (64, 8)} == {1024}
    assert {c.d for c, _ in quick} == {32, 64, 128} and {c.heads for c, _ in quick} == {1, 4, 8, 16}
    by_impl = {}
    for cell in plan("quick", ["torch_sdpa", "xformers_memeff"]):
        by_impl.setdefault(cell.implementation, []).append(cell.case.id)
    assert len(by_impl["torch_sdpa"]) == 11 and len(by_impl["xformers_memeff"]) == 4  # d, heads, decode: main ones
    full = sweep_cases("full")
    assert {c.tq for c, _ in full} == {2 ** i for i in range(7, 14)}
    assert {c.d for c, _ in full} == {32, 64, 128} and {c.heads for c, _ in full} == {1, 4, 8, 16}
    assert {c.causal for c, _ in full} == {False, True}
    overridden = sweep_cases("quick", {"T": [64, 32], "causal": [True], "mode": ["fwd", "bwd"]})
    assert len(overridden) == 4 and all(c.causal for c, _ in overridden)
    cells = plan("quick", ["b", "a"], {"T": [512, 128]})
    assert [(c.implementation, c.case.tq) for c in cells] == [("b", 128), ("b", 512), ("a", 128), ("a", 512)]
    with pytest.raises(UsageError, match="unknown suite"):
        sweep_cases("huge")


def test_budget_skips_cells_predicted_too_big_and_says_why() -> None:
    budget = Budget(memory_bytes=2**30, cell_seconds=10.0)
    small = PlannedCell("naive", AttentionCase(heads=8, tq=512, d=64), "fwd")
    assert budget.check(small, peak_gflops=100.0) is None
    budget.record(small.implementation, small.case, small.mode, median_s=0.01, extra_bytes=3 * 8 * 512 * 512 * 4)  # dense: grows as T^2
    big = PlannedCell("naive", AttentionCase(heads=8, tq=8192, d=64), "fwd")
    reason = budget.check(big, peak_gflops=100.0)
    assert reason is not None and "memory budget" in reason and "GiB" in reason
    slow = Budget(memory_bytes=2**40, cell_seconds=10.0)
    slow.record(small.implementation, small.case, small.mode, median_s=0.01, extra_bytes=None)
    reason = slow.check(big, peak_gflops=100.0)
    assert reason is not None and "time budget" in reason


def test_predictions_are_calibrated_from_what_this_run_measured() -> None:
    """A 2-core machine's case: T=4096 cells predicted at 5% of peak (17x pessimistic) and skipped."""
    budget = Budget(memory_bytes=2**40, cell_seconds=20.0)
    measured = PlannedCell("tiled", AttentionCase(heads=8, tq=4096, d=64), "fwd")
    true_rate = 160e9
    budget.record(measured.implementation, measured.case, measured.mode,
                  median_s=attention_flops(measured.case, "fwd") / true_rate, extra_bytes=None)
    for causal in (False, True):
        for mode in ("fwd", "fwd+bwd"):
            cell = PlannedCell("tiled", AttentionCase(heads=8, tq=4096, d=64, causal=causal), mode)
            seconds, _, how = budget.predict(cell, peak_gflops=190.0)
            assert seconds == pytest.approx(attention_flops(cell.case, mode) / true_rate), how
            assert budget.check(cell, peak_gflops=190.0) is None
    other = PlannedCell("torch_sdpa", AttentionCase(heads=8, tq=4096, d=64), "fwd")  # nothing of its own yet
    seconds, _, how = budget.predict(other, peak_gflops=190.0)
    assert seconds == pytest.approx(attention_flops(other.case, "fwd") / true_rate) and "this run" in how


def test_cells_named_on_the_command_line_are_never_skipped_for_time() -> None:
    from harness.cli import build_parser
    from harness.cli.bench_cmd import settings_from_args

    def settings(*argv: str):
        return settings_from_args(build_parser().parse_args(["bench", *argv]))

    assert settings().cell_budget_s == 20.0  # the quick suite's own cells keep its budget
    assert settings("--T", "4096").cell_budget_s is None
    assert settings("--causal", "both", "--mode", "fwd", "fwd+bwd").cell_budget_s is None
    assert settings("--T", "4096", "--cell-budget", "5").cell_budget_s == 5.0
    never = Budget(memory_bytes=2**50, cell_seconds=None)
    huge = PlannedCell("slow", AttentionCase(heads=64, tq=65536, d=128), "fwd+bwd")
    assert never.check(huge, peak_gflops=1.0) is None
    assert never.cell_seconds_predicted(huge, peak_gflops=1.0) > 1e5  # the estimate is still reported
    tight = Budget(memory_bytes=2**30, cell_seconds=None)
    assert "memory budget" in (tight.check(huge, peak_gflops=1.0) or "")  # memory still protects the machine


def test_a_cell_predicted_to_time_out_is_skipped_from_its_own_measured_sizes_only() -> None:
    """Named cells (no time budget) still never start a task the timeout would kill: the warm-up call and the first
    timed call, extrapolated from the implementation's own smaller cells, must fit the timeout. An a-priori rate
    (nothing measured yet) never predicts a timeout: it is pessimistic by design."""
    budget = Budget(memory_bytes=2**50, cell_seconds=None, timeout_s=60.0)
    huge = PlannedCell("slow", AttentionCase(heads=8, tq=16384, d=64), "fwd+bwd")
    assert budget.check(huge, peak_gflops=1.0) is None  # nothing measured: no timeout predicted
    small = PlannedCell("slow", AttentionCase(heads=8, tq=1024, d=64), "fwd+bwd")
    budget.record(small.implementation, small.case, small.mode, median_s=1.0, extra_bytes=None)  # 256x the work ahead
    reason = budget.check(huge, peak_gflops=1.0)
    assert reason is not None and "60 s timeout" in reason and "raise --timeout" in reason
    assert budget.check(PlannedCell("slow", AttentionCase(heads=8, tq=2048, d=64), "fwd+bwd"), peak_gflops=1.0) is None


def test_the_quick_suite_measures_memory_only_where_the_report_fits_it() -> None:
    """Peak memory is fitted along T: the T sweep's cells get a memory run, the d, heads and decode sweeps'
    cells are timed without one (the T sweep's d = 64, H = 8 cell, which the d and heads sweeps share, keeps it)."""
    from harness.bench.sweeps import MAIN, plan

    cells = plan("quick", [*MAIN, "tiled_decode"])
    memory = {(c.implementation, c.case.id) for c in cells if c.memory}
    timed_only = {(c.implementation, c.case.id) for c in cells if not c.memory}
    assert ("torch_sdpa", "B1-H8-T2048-d64-float32") in memory
    assert ("torch_sdpa", "B1-H8-T1024-d64-float32") in memory  # on the T sweep too
    assert ("torch_sdpa", "B1-H8-T1024-d128-float32") in timed_only
    assert ("torch_sdpa", "B1-H16-T1024-d64-float32") in timed_only
    assert any(c.case.tq == 1 and not c.memory for c in cells)  # decode steps: roofline points, no memory fit
    assert all(c.memory for c in plan("quick", ["torch_sdpa"], {"d": [32, 128]}))  # named sizes: measured in full


def test_noisy_cells_blame_the_machine_only_when_it_measured_busy() -> None:
    assert noise_cause([0.4, 1.6, None], 2).startswith("the machine was busy (load up to 1.6 on 2 CPUs)")
    quiet = noise_cause([0.4, 1.4], 2)
    assert quiet.startswith("the machine was not busy (load at most 1.4 on 2 CPUs)") and "busy;" not in quiet
    assert "unknown" in noise_cause([None], 2) and "unknown" in noise_cause([3.0], None)
    # a run timing 2 threads on 2 cores makes a load of 2 itself: busy only beyond it
    assert noise_cause([1.9, 2.2], 2, threads=2).startswith("the machine was not busy (load at most 2.2 on 2 CPUs, "
                                                            "the run's own 2 threads included)")
    assert noise_cause([2.6], 2, threads=2).startswith("the machine was busy (load up to 2.6 on 2 CPUs")
    assert noise_cause([1.6], 2, threads=1).startswith("the machine was busy")


def test_a_case_whose_contenders_cannot_hold_their_inputs_together_is_timed_in_groups_that_can() -> None:
    """Rounds hold every contender's input sets at once: a decode step with 256 MiB of K and V is ~3 GiB a worker,
    so ten contenders are split into groups that fit the budget, in order, and a small case stays one group."""
    big = AttentionCase(batch=8, heads=32, kv_heads=8, tq=1, tk=4096, d=128)
    budget = Budget(memory_bytes=14 * 2**30, cell_seconds=None)
    cells = [PlannedCell(f"k{i}", big, "fwd") for i in range(10)]
    each = budget.held_bytes(cells[0])
    assert 2.5 * 2**30 < each < 4 * 2**30, each / 2**30
    groups = budget.held_together(cells)
    assert [i for g in groups for i in g] == list(range(10)) and len(groups) >= 3
    assert all(sum(budget.held_bytes(cells[i]) for i in g) <= budget.memory_bytes for g in groups)
    small = [PlannedCell(f"k{i}", AttentionCase(heads=2, tq=256, d=64), "fwd") for i in range(10)]
    assert budget.held_together(small) == [list(range(10))]
