"""`attnbench ab`'s decision on synthetic rounds: slower, unchanged, faster, undecided; the false-alarm bound; bad input.

No timing here: the rounds are made up (seeded), so every assertion is about the statistics and the
verdicts, never about this machine's speed. The measured false-alarm and detection rates are in
benchmarks/ab_false_alarms.py.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from harness.analysis.comparison import (
    FASTER,
    SLOWER,
    UNCHANGED,
    UNDECIDED,
    judge_paired,
    median_interval,
    per_cell_alpha,
    rounds_needed,
)
from harness.bench.ab import ABRun, ABSettings, CellRounds
from harness.bench.ab_files import side_cell, write_sides
from harness.case.attention import AttentionCase
from harness.cli import main
from harness.report.ab import NEWLY_FAILING, NOT_COMPARED, judge, judge_cell, markdown
from harness.report.compare import compare_files

CASE = AttentionCase(batch=1, heads=2, tq=64, d=16)


def rounds(rng: random.Random, n: int, slowdown: float, noise: float = 0.05) -> CellRounds:
    """n rounds whose load (a factor up to 3x, the same for both sides of a round) moves every round."""
    cell = CellRounds("k", CASE, "fwd")
    for _ in range(n):
        load = rng.choice([1.0, 1.0, 1.5, 3.0]) * rng.uniform(0.9, 1.1)
        cell.base_s.append(1e-3 * load * math.exp(rng.gauss(0, noise)))
        cell.head_s.append(1e-3 * slowdown * load * math.exp(rng.gauss(0, noise)))
        cell.load.append(1.0 + load)
    return cell


def test_the_median_interval_is_the_sign_tests_order_statistics() -> None:
    from scipy.stats import binom

    values = list(range(1, 21))  # n = 20: P(Bin(20, 1/2) <= 5) = 0.0207 <= 0.025 < P(<= 6)
    low, high, level = median_interval(values, 0.05)
    assert (low, high) == (6, 15) and level == pytest.approx(1 - 2 * binom.cdf(5, 20, 0.5))
    assert level >= 0.95
    few_low, few_high, few_level = median_interval([3.0, 1.0, 2.0], 0.05)
    assert (few_low, few_high) == (1.0, 3.0) and few_level == pytest.approx(0.75)  # too few for 95%
    assert rounds_needed(0.05) == 6 and median_interval(range(6), 0.05)[2] >= 0.95


def test_verdicts_slower_unchanged_faster_undecided() -> None:
    rng = random.Random(1)
    slow = judge_paired(rounds(rng, 20, 1.3).ratios, 0.10, 0.05)
    assert 1.2 < slow.ratio < 1.4 and slow.low > 1.0 and slow.verdict == SLOWER
    same = judge_paired(rounds(rng, 20, 1.0, noise=0.02).ratios, 0.10, 0.05)
    assert same.verdict == UNCHANGED and same.low < 1.0 < same.high
    fast = judge_paired(rounds(rng, 20, 0.6).ratios, 0.10, 0.05)
    assert fast.verdict == FASTER
    few = judge_paired(rounds(rng, 4, 2.0).ratios, 0.10, 0.05)
    assert few.coverage < 0.95 and few.verdict == UNDECIDED  # 4 rounds cannot give a 95% interval
    assert few.mde_or_none is None and "add rounds" in few.reason
    # beyond the threshold but the interval reaches below 1: never slower
    straddle = judge_paired([0.95, 0.98, 1.2, 1.25, 1.3, 1.3, 1.35, 0.9, 1.22, 1.21], 0.10, 0.05)
    assert straddle.ratio > 1.1 and straddle.low < 1.0 and straddle.verdict == UNDECIDED
    # a real slow-down below the threshold is not slower beyond it
    small = judge_paired(rounds(rng, 20, 1.04, noise=0.01).ratios, 0.10, 0.05)
    assert small.low > 1.0 and small.verdict != SLOWER


def test_identical_sides_raise_a_false_alarm_at_most_alpha_over_two() -> None:
    """Exchangeable sides (the random order makes them so): the sign-test interval's lower end is above 1
    in at most alpha/2 of the comparisons, whatever the load does between rounds."""
    rng = random.Random(7)
    trials = 4000
    alarms = sum(judge_paired(rounds(rng, 20, 1.0, noise=0.3).ratios, 0.0001, 0.05).verdict == SLOWER
                 for _ in range(trials))
    assert alarms / trials <= 0.025 + 3 * math.sqrt(0.025 * 0.975 / trials), alarms
    # and a 30% slow-down in the same noise is found nearly always
    found = sum(judge_paired(rounds(rng, 20, 1.3, noise=0.1).ratios, 0.10, 0.05).verdict == SLOWER
                for _ in range(400))
    assert found >= 0.9 * 400


def test_many_cells_share_the_false_alarm_budget() -> None:
    assert per_cell_alpha(0.05, 4) == pytest.approx(0.0125) and per_cell_alpha(0.05, 0) == 0.05


def _run(*cells: CellRounds) -> ABRun:
    return ABRun(settings=ABSettings(base="base/p.py", head="head/p.py", rounds=20), cells=list(cells), provenance={})


def test_a_head_that_no_longer_runs_fails_the_comparison_a_base_failure_does_not() -> None:
    rng = random.Random(2)
    broken = CellRounds("k", CASE, "fwd")
    broken.stop("head", "crash", "worker killed by SIGSEGV")
    assert judge_cell(broken, 0.1, 0.05).verdict == NEWLY_FAILING
    gone = CellRounds("k", CASE, "fwd")
    gone.stop("base", "error", "ImportError")
    assert judge_cell(gone, 0.1, 0.05).verdict == NOT_COMPARED
    result = judge(_run(rounds(rng, 20, 1.0, noise=0.01), broken), 0.1, 0.05)
    assert result.failed and result.cell_alpha == pytest.approx(0.05)  # one cell compared: the whole alpha
    ok = judge(_run(rounds(rng, 20, 1.0, noise=0.01)), 0.1, 0.05)
    assert not ok.failed and "0 slower, 0 faster beyond 10%" in markdown(ok)


def test_side_files_hold_rounds_and_compare_tests_them(tmp_path: Path) -> None:
    rng = random.Random(4)
    cell = rounds(rng, 20, 2.0, noise=0.02)
    stored = side_cell(cell, "head", 1)
    assert stored.sample_unit == "round" and len(stored.samples_s) == 20 and stored.stats is not None
    files = write_sides(_run(cell), tmp_path / "ab")
    result = compare_files(files["base"], files["head"])
    (compared,) = result.cells
    assert compared.verdict == SLOWER and compared.method == "paired rounds" and compared.low > 1.5


def test_ab_and_compare_on_its_side_files_give_the_same_verdicts(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """One engine: `compare` pairs the two side files' rounds again, so every cell gets ab's verdict, ratio,
    interval and MDE, at the same Bonferroni level (four cells: slower, faster, unchanged, undecided)."""
    rng = random.Random(11)
    cells = [rounds(rng, 20, 1.3, noise=0.02), rounds(rng, 20, 0.7, noise=0.02), rounds(rng, 20, 1.0, noise=0.01),
             CellRounds("k", CASE, "fwd")]
    cells[3].base_s = [1e-3] * 10
    cells[3].head_s = [1e-3 * r for r in (0.95, 0.98, 1.2, 1.25, 1.3, 1.3, 1.35, 0.9, 1.22, 1.21)]
    cases = [CASE.with_(tq=t) for t in (32, 64, 96, 128)]
    for cell, case in zip(cells, cases):
        cell.case = case
    run = _run(*cells)
    ab = judge(run, 0.10, 0.05)
    files = write_sides(run, tmp_path / "ab")
    compared = {c.case_id: c for c in compare_files(files["base"], files["head"]).cells}
    assert [c.verdict for c in ab.cells] == [SLOWER, FASTER, UNCHANGED, UNDECIDED]
    for mine in ab.cells:
        theirs = compared[mine.case_id]
        assert (theirs.verdict, theirs.method) == (mine.verdict, "paired rounds")
        assert (theirs.ratio, theirs.low, theirs.high, theirs.mde) == pytest.approx((mine.ratio, mine.low, mine.high,
                                                                                     mine.mde))
    # the command line too: the same exit status and the same counts in JSON
    assert main(["compare", str(files["base"]), str(files["head"]), "--json"]) == 1
    document = json.loads(capsys.readouterr().out)
    assert (document["slower"], document["faster"], document["undecided"]) == (1, 1, 1)
    assert document["interval"] == ab.as_dict()["interval"] == "95% interval"


def test_every_table_states_one_level_and_each_cells_mde() -> None:
    rng = random.Random(5)
    result = judge(_run(rounds(rng, 20, 1.3, noise=0.02)), 0.10, 0.05)
    (cell,) = result.cells
    assert cell.mde is not None and 1.0 < cell.mde < 1.1  # 2% noise, 20 rounds: a few percent is decidable
    text = markdown(result)
    assert "95% interval" in text and "MDE" in text and f"{cell.mde:.3f}x" in text
    assert "97.5%" not in text and "(99%)" not in text  # one wording: no per-cell level beside the 95%
    assert result.as_dict()["cells"][0]["mde"] == cell.mde


def test_bad_input_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ab", str(tmp_path / "nope.py"), str(tmp_path / "nope.py")]) == 2
    assert "BASE" in capsys.readouterr().err
    plugin = tmp_path / "p.py"
    plugin.write_text("")
    assert main(["ab", str(plugin), str(plugin), "--threshold", "25"]) == 2
    assert main(["ab", f"{tmp_path / 'missing'}::mod", str(plugin)]) == 2
    assert "not a folder" in capsys.readouterr().err


@pytest.mark.slow
def test_ab_names_what_each_side_declares_when_they_share_nothing(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    for side, name in (("a", "one"), ("b", "two")):
        (tmp_path / side).mkdir()
        (tmp_path / side / "p.py").write_text(
            f"from harness import register\n\n@register({name!r}, backend='torch')\n"
            "def f(q, k, v, *, causal=False, mask=None, scale=None):\n    return q\n")
    code = main(["ab", str(tmp_path / "a" / "p.py"), str(tmp_path / "b" / "p.py"), "--out", str(tmp_path / "o"),
                 "--json", "-"])
    err = capsys.readouterr().err
    assert code == 2 and "base: one" in err and "head: two" in err, err
    assert not (tmp_path / "o").exists()  # nothing written: the usage error came before any timing


@pytest.mark.tier  # the theoretical roofs are this CPU's
def test_a_side_faster_than_physics_allows_is_implausible_and_a_head_that_is_fails() -> None:
    from harness.bench.ab import _floor, _hold_to_floor
    from harness.bench.roofs import cpu_roofs
    from harness.reference.flops import attention_flops, compulsory_bytes
    from harness.results import Floor, Peak

    floor = _floor(CellRounds("k", CASE, "fwd"), (None, None))  # the theoretical roofs alone, on a CPU
    theory = cpu_roofs()  # this machine's: the floor is the slower of its work over each roof, whatever the CPU
    expected = max(attention_flops(CASE, "fwd") / (theory.gflops[CASE.dtype] * 1e9),
                   compulsory_bytes(CASE, "fwd") / (theory.load_gbps * 1e9))
    assert floor.floor_s is not None and floor.floor_s == pytest.approx(expected, rel=1e-9) and floor.floor_s > 0
    measured = _floor(CellRounds("k", CASE, "fwd"), (Peak(gflops=1.0, fastest_call_gflops=1.0), None))
    assert (measured.floor_s or 0.0) >= floor.floor_s  # a measured peak can only raise the roof's estimate

    rng = random.Random(3)
    honest = rounds(rng, 20, 1.0, noise=0.01)  # calls of about 1 ms
    honest.floor = Floor(floor_s=1e-4)
    _hold_to_floor(honest)
    assert honest.status == "ok"
    cheat = rounds(rng, 20, 0.05, noise=0.01)  # head 20x faster: under a floor of 0.1 ms
    cheat.floor = Floor(floor_s=1e-4, compute_roof_gflops=100.0, memory_roof_gbps=50.0)
    _hold_to_floor(cheat)
    assert cheat.status == "implausible" and cheat.side == "head" and "physics floor" in (cheat.reason or "")
    assert judge_cell(cheat, 0.1, 0.05).verdict == NEWLY_FAILING  # flagged, never a 20x win
    bad_base = rounds(rng, 20, 20.0, noise=0.01)
    bad_base.base_s = [t * 0.05 for t in bad_base.base_s]
    bad_base.floor = Floor(floor_s=1e-4)
    _hold_to_floor(bad_base)
    assert bad_base.side == "base" and judge_cell(bad_base, 0.1, 0.05).verdict == NOT_COMPARED
