"""Interleaved rounds: the paired ratio's interval, the shuffled orders, the rounded loop, the stored record.

Decision logic on synthetic data (no test depends on the machine's speed or load); the loop on real
calls of a small torch operation, checked for its shape (sizes, kept calls), never for its times.
"""

from __future__ import annotations

import math

import pytest
import torch

from harness.analysis.stats import half_binomial_cdf, median_interval
from harness.bench.guard import InputSet
from harness.bench.loop import RoundedLoop, timed_loop
from harness.bench.rounds import Probe, choose_reference, round_medians, round_order, rounds_record
from harness.bench.timing import TimingConfig
from harness.results import BenchCell, Rounds
from harness.results.schema import cell_from_json, cell_to_json


def test_the_median_interval_is_exact_from_the_order_statistics() -> None:
    median, low, high, coverage = median_interval([3.0, 1.0, 2.0, 5.0, 4.0, 6.0])
    assert (median, low, high) == (3.5, 1.0, 6.0)
    assert coverage == pytest.approx(1 - 2 / 64)  # min to max of 6: 1 - 2 * 0.5^6
    _, low, high, coverage = median_interval(list(range(20)))
    assert (low, high) == (5.0, 14.0) and coverage >= 0.95  # narrower than min..max once n allows
    assert median_interval([2.0])[1:3] == (2.0, 2.0)
    with pytest.raises(ValueError):
        median_interval([])


@pytest.mark.parametrize("n", [1, 2, 5, 6, 9, 20, 101, 1024, 1025, 4000])
def test_the_binomial_tail_is_scipys(n: int) -> None:
    """The interval's coverage is SciPy's binom.cdf, read without importing SciPy's statistics in a command."""
    from scipy.stats import binom

    ours = list(half_binomial_cdf(n))
    assert len(ours) == n + 1 and ours[-1] == pytest.approx(1.0)
    assert ours == pytest.approx([float(binom.cdf(j, n, 0.5)) for j in range(n + 1)], rel=1e-9, abs=1e-300)


def test_a_load_change_between_rounds_cancels_in_the_paired_ratio() -> None:
    # A is 1.2x B in every round while the machine slows 3x in rounds 2-4: unpaired medians would mix the
    # loads; the per-round ratios are all 1.2.
    load = [1.0, 1.0, 3.0, 3.0, 3.0, 1.0]
    b = [0.010 * f for f in load]
    a = [0.012 * f for f in load]
    record = rounds_record(a, [1] * 6, [0] * 6, 2, "b", b, Probe())
    assert record.ratio == pytest.approx(1.2) and record.ratio_low == pytest.approx(1.2)
    assert record.ratio_high == pytest.approx(1.2) and record.reference == "b"


def test_a_tie_gives_an_interval_that_holds_1_and_a_real_difference_one_that_excludes_it() -> None:
    tie = rounds_record([1.0, 1.1, 0.9, 1.05, 0.97, 1.02], [1] * 6, [0] * 6, 2, "r", [1.0] * 6, Probe())
    assert tie.ratio_low is not None and tie.ratio_high is not None and tie.ratio_low < 1 < tie.ratio_high
    slower = rounds_record([1.3, 1.25, 1.4, 1.35, 1.28, 1.33], [1] * 6, [0] * 6, 2, "r", [1.0] * 6, Probe())
    assert slower.ratio_low is not None and slower.ratio_low > 1


def test_the_reference_itself_and_a_lone_contender_carry_no_ratio() -> None:
    probe = Probe(gemm_gflops=[10.0, 30.0, 20.0], read_gbps=[5.0, 4.0, 6.0])
    alone = rounds_record([1.0, 1.0, 1.0], [2, 2, 2], [0, 1, 0], 1, None, None, probe)
    assert alone.ratio is None and alone.reference is None
    assert alone.gemm_gflops == 30.0 and alone.read_gbps == 6.0  # the highest reading: load only lowers a roof


def test_the_reference_is_the_one_asked_for_else_torch_sdpa_else_the_first() -> None:
    assert choose_reference(["a", "torch_sdpa", "b"], "b") == "b"
    assert choose_reference(["a", "torch_sdpa", "b"], None) == "torch_sdpa"
    assert choose_reference(["a", "b"], "missing") == "a"
    assert choose_reference(["a"], None) is None


def test_rounds_are_shuffled_each_round_reproducibly() -> None:
    names = ["a", "b", "c", "d", "probe"]
    orders = round_order(names, 12, "case-1")
    assert all(sorted(o) == sorted(names) for o in orders)
    assert len({tuple(o) for o in orders}) > 1  # not one fixed order
    assert {o[0] for o in orders} != {"a"}  # nobody always goes first
    assert orders == round_order(names, 12, "case-1")


def test_round_medians_split_the_samples_in_order() -> None:
    assert round_medians([1.0, 3.0, 2.0, 10.0, 20.0, 30.0], [3, 1, 2]) == [2.0, 10.0, 25.0]


def _sets() -> list[InputSet]:
    a = torch.randn(32, 32)
    return [InputSet(call=lambda: a @ a, named=[("a", a)], inputs=None)]


def test_a_rounded_loop_takes_each_round_a_share_and_checks_first_random_and_last() -> None:
    config = TimingConfig(warmup_s=0.0, budget_s=0.0, min_samples=5, rounds=3)
    loop = RoundedLoop(_sets(), config, "torch", rounds=3)
    sizes = [len(loop.round()) for _ in range(3)]
    assert loop.done
    with pytest.raises(RuntimeError):
        loop.round()
    result = loop.result()
    # the 5 samples asked for, shared out: ceil(5 / 3), then ceil(3 / 2), then the last one (budget spent at once)
    assert sizes == [2, 2, 1] and result.round_sizes == (2, 2, 1)
    assert len(result.samples) == 5
    kept = sorted({k.index for k in result.kept})
    assert kept[0] == 0 and kept[-1] == 4  # the first and the last call of the last round


def test_one_round_is_the_plain_loop() -> None:
    config = TimingConfig(warmup_s=0.0, budget_s=0.0, min_samples=4)
    loop = timed_loop(_sets(), config, "torch")
    assert len(loop.samples) == 4 and loop.round_sizes == (4,)
    assert loop.kept[0].index == 0 and loop.kept[-1].index == 3


def test_the_rounds_record_reads_back_whole_and_old_cells_read_without_it() -> None:
    record = rounds_record([0.2, 0.3], [2, 3], [1, 0], 2, "r", [0.1, 0.15], Probe([50.0], [9.0]))
    cell = BenchCell(implementation="x", case={"tq": 8}, case_id="c", mode="fwd", status="ok", rounds=record)
    stored = cell_to_json(cell)
    back = cell_from_json(stored)
    assert isinstance(back.rounds, Rounds) and back.rounds.ratios == (2.0, 2.0) and back.rounds.sizes == (2, 3)
    assert cell_to_json(back) == stored
    old = {k: v for k, v in stored.items() if k != "rounds"}
    assert cell_from_json(old).rounds is None and "rounds" not in cell_to_json(cell_from_json(old))
    assert math.isclose(back.rounds.ratio or 0.0, 2.0)


def test_a_reference_not_timed_is_a_usage_error(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    from harness.cli import main

    out = tmp_path / "run.json"
    assert main(["bench", "--only", "torch_sdpa", "--reference", "tiled", "--T", "64", "--out", str(out), "--quiet"]) == 2
    assert "--reference tiled: not among the implementations timed (torch_sdpa)" in capsys.readouterr().err
    assert not out.exists()


def test_fast_contenders_get_more_shorter_rounds_and_slow_ones_the_least() -> None:
    from harness.bench.rounds import MAX_ROUNDS, rounds_for

    assert rounds_for(0.4, [0.04, 0.010], 6) == 10  # about one call of the slowest a round
    assert rounds_for(0.4, [0.5, 0.01], 6) == 6
    assert rounds_for(0.4, [1e-5], 6) == MAX_ROUNDS
    assert rounds_for(0.4, [], 6) == 6


def test_a_loop_can_be_given_more_rounds_after_its_first() -> None:
    config = TimingConfig(warmup_s=0.0, budget_s=0.0, min_samples=1, rounds=2)
    loop = RoundedLoop(_sets(), config, "torch", rounds=2)
    loop.round()
    loop.round(rounds=4)
    assert not loop.done
    loop.round(rounds=4)
    loop.round(rounds=4)
    assert loop.done and loop.result().round_sizes == (1, 1, 1, 1)
    assert loop.result().kept[-1].index == 3


def test_auto_clock_is_cpu_time_for_one_thread_on_the_cpu_only() -> None:
    from harness.bench.timing import auto_clock

    assert auto_clock("auto", "cpu", 1) == "cpu"
    assert auto_clock("auto", "cpu", 2) == "wall"  # threads that spin while they wait count as work on CPU time
    assert auto_clock("auto", "cuda", 1) == "wall"  # a GPU's work is not the host's CPU time
    assert auto_clock("wall", "cpu", 1) == "wall" and auto_clock("cpu", "cpu", 4) == "cpu"


def test_on_cpu_time_the_samples_the_loop_and_the_captures_add_up_on_one_clock() -> None:
    """A call that waits (a sleep) costs next to no CPU time: its samples, and the loop they sum into, are both
    read on the CPU clock, so the worker's account holds together (no 'time went somewhere' finding)."""
    import time

    from harness.bench.guard import CPU_CLOCK
    from harness.bench.verdicts import _accounting
    from harness.results import Accounting

    a = torch.randn(16, 16)

    def waits() -> torch.Tensor:
        time.sleep(0.02)
        return a @ a

    config = TimingConfig(warmup_s=0.0, budget_s=0.0, min_samples=4, clock="cpu")
    loop = timed_loop([InputSet(call=waits, named=[("a", a)], inputs=None)], config, "torch", sample_clock=CPU_CLOCK)
    assert len(loop.samples) == 4
    assert sum(loop.samples) < 4 * 0.02 / 2  # the sleeps are not CPU time
    assert loop.loop_s < 4 * 0.02  # nor the loop's, read on the same clock
    acc = Accounting(total_s=1.0, loop_s=loop.loop_s, captures_s=loop.captures_s, phases_s=1.0, checks_s=0.0)
    assert not [p for p in _accounting(sum(loop.samples), len(loop.samples), acc, None) if "samples add up" in p]


def test_bench_clock_flag_resolves_and_cpu_time_on_a_gpu_is_a_usage_error(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    from harness.cli import main

    out = tmp_path / "run.json"
    assert main(["bench", "--only", "torch_sdpa", "--device", "cuda", "--clock", "cpu", "--T", "64",
                 "--out", str(out), "--quiet"]) == 2
    assert "--clock cpu" in capsys.readouterr().err and not out.exists()


def test_a_slow_cell_makes_no_extra_call_past_its_last_rounds_budget() -> None:
    """Calls (sleeps of 20 ms) longer than a round's budget (10 ms): one call a round, the last round's one call is
    the checked last, not a second call after the budget is spent."""
    import time

    a = torch.randn(8, 8)

    def slow() -> torch.Tensor:
        time.sleep(0.02)
        return a @ a

    config = TimingConfig(warmup_s=0.0, budget_s=0.03, min_samples=1, rounds=3)
    loop = RoundedLoop([InputSet(call=slow, named=[("a", a)], inputs=None)], config, "torch", rounds=3)
    for _ in range(3):
        loop.round()
    result = loop.result()
    assert result.round_sizes == (1, 1, 1)
    assert result.kept[-1].index == 2  # the last call is still the checked one
