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
from harness.bench.ab import ABRun, ABSettings, CellRounds, contender, paired_rounds
from harness.bench.ab_files import side_cell, write_sides
from harness.case.attention import AttentionCase
from harness.cli import main
from harness.report.ab import NEWLY_FAILING, NOT_COMPARED, judge, judge_cell, markdown
from harness.report.compare import compare_files
from harness.results import BenchCell, CellCase, Rounds, Status

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
    processes = cells[0].processes if cells else 1
    return ABRun(settings=ABSettings(base="base/p.py", head="head/p.py", rounds=20, processes=processes),
                 cells=list(cells), provenance={})


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


def _side(side: str, status: str, fastest: list[float], reason: str | None = None, process: int = 1) -> BenchCell:
    """A bench cell of contender ``k@side.process``: three calls a round, the round's fastest first."""
    samples = tuple(t * f for t in fastest for f in (1.0, 1.2, 1.1)) if status == "ok" else ()
    rounds = Rounds(sizes=(3,) * len(fastest), positions=tuple((i + (side == "head")) % 2 for i in range(len(fastest))))
    return BenchCell(implementation=contender("k", side, process), case=CellCase.of(CASE), case_id=CASE.id, mode="fwd",
                     status=Status(status), reason=reason, samples_s=samples, rounds=rounds if samples else None)


def test_the_comparison_is_a_view_of_the_bench_run_its_sides_were_timed_in() -> None:
    """Each round's fastest call per side, paired; a side bench judged ``implausible`` (under the physics floor)
    stops the pair: a head that is fails the comparison, never wins it; a base that is leaves nothing to compare."""
    base = [1e-3 * (1 + i / 100) for i in range(20)]
    (pair,) = paired_rounds([_side("base", "ok", base), _side("head", "ok", [t * 1.3 for t in base])], calls=3)
    assert pair.implementation == "k" and pair.base_s == pytest.approx(base) and len(pair.ratios) == 20
    assert pair.ratios == pytest.approx([1.3] * 20) and pair.first[:2] == ["base", "head"]
    assert judge_cell(pair, 0.1, 0.05).verdict == SLOWER

    cheat = _side("head", "implausible", base, "fastest call 0.05 ms is under the physics floor 0.1 ms")
    (stopped,) = paired_rounds([_side("base", "ok", base), cheat], calls=3)
    assert (stopped.status, stopped.side) == ("implausible", "head") and "physics floor" in (stopped.reason or "")
    assert judge_cell(stopped, 0.1, 0.05).verdict == NEWLY_FAILING  # flagged, never a 20x win
    (no_base,) = paired_rounds([_side("base", "implausible", base, "under the floor"), _side("head", "ok", base)], 3)
    assert no_base.side == "base" and judge_cell(no_base, 0.1, 0.05).verdict == NOT_COMPARED


def test_a_verdict_must_hold_in_every_pair_of_worker_processes(tmp_path: Path) -> None:
    """Rounds within one pair of processes share where the processes' buffers landed: identical code in two pairs
    that read 0.88x and 1.14x is no regression (where two others read 1.12x and 1.14x), though each pair's rounds
    are tight; a real 1.3x in every pair is."""
    base = [1e-3 * (1 + i / 1000) for i in range(5)]
    same = [_side(side, "ok", [t * f for t in base], process=p)
            for p, f in ((1, 1.0), (2, 1.0), (3, 1.0), (4, 1.0)) for side in ("base",)]
    same += [_side("head", "ok", [t * f for t in base], process=p) for p, f in ((1, 0.88), (2, 1.14), (3, 1.12), (4, 1.14))]
    (pair,) = paired_rounds(same, calls=3)
    assert pair.processes == 4 and len(pair.ratios) == 20
    assert judge_paired(pair.ratios, 0.1, 0.05).verdict == SLOWER  # pooled as if one pair: a false alarm
    verdict = judge_cell(pair, 0.1, 0.05)
    assert verdict.verdict == UNDECIDED and verdict.low is not None and verdict.low <= 0.88 + 1e-9
    files = write_sides(_run(pair), tmp_path / "ab")  # compare on the side files: the same widened interval
    (theirs,) = compare_files(files["base"], files["head"]).cells
    assert (theirs.verdict, theirs.low, theirs.high) == (UNDECIDED, pytest.approx(verdict.low), pytest.approx(verdict.high))
    slow = [_side(side, "ok", [t * (f if side == "head" else 1.0) for t in base], process=p)
            for p, f in ((1, 1.22), (2, 1.38), (3, 1.3), (4, 1.31)) for side in ("base", "head")]
    (regressed,) = paired_rounds(slow, calls=3)
    assert judge_cell(regressed, 0.1, 0.05).verdict == SLOWER


def test_processes_are_checked_against_rounds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plugin = tmp_path / "p.py"
    plugin.write_text("")
    assert main(["ab", str(plugin), str(plugin), "--rounds", "3", "--processes", "4"]) == 2
    assert "--processes 4 is more than --rounds 3" in capsys.readouterr().err
