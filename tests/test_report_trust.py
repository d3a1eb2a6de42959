"""A report a reader can trust: conclusions only from cells that count, compared on one case; every cell left out or
flagged named at the top with why; no exponent from too few points, none at the fit's bound or with too wide an
interval called "ok"; every percentage above a measured roof marked with its likely cause.

In-process, on small synthetic frames and on the synthetic bench file of benchmarks/report_trust.py (no timing,
no plots drawn)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from benchmarks.report_trust import write_document
from harness.analysis.costmodel import CostFit, fit_cost
from harness.analysis.growth import MAX_INTERVAL_WIDTH, Row, without_short_fit
from harness.report import html, markdown, tables, trust
from harness.report.findings import Analysis, analyse
from harness.report.headline import headline
from harness.report.load import ROOF_PROBLEM_BYTES, Results, load

CASE = {"tk": 0, "causal": False, "mode": "fwd", "d": 64, "heads": 4, "batch": 1, "dtype": "float32"}


def _cell(name: str, t: int, median: float, status: str = "ok", case_id: str | None = None, **extra: object
          ) -> dict[str, object]:
    return {**CASE, "implementation": name, "tq": t, "tk": t, "median": median, "status": status,
            "case_id": case_id or f"T{t}", "reason": None, "roof_problem": None, **extra}


def _lines(rows: list[dict[str, object]]) -> dict[str, str]:
    results = Results(bench=pd.DataFrame(rows), verify=pd.DataFrame())
    return {line.label: line.text for line in headline(results)}


def test_the_fastest_is_ranked_on_one_case_from_cells_that_count_and_names_who_was_not() -> None:
    rows = [_cell("a", 256, 2.0), _cell("b", 256, 1.0), _cell("c", 256, 3.0),
            _cell("a", 1024, 20.0), _cell("c", 1024, 30.0),
            _cell("b", 1024, 1.0, status="implausible", reason="the worker's clock does not add up"),
            _cell("d", 1024, 0.5, roof_problem="300% of the GEMM peak measured beside it: a measurement problem"),
            _cell("e", 1024, 0.1, case_id="T1024-gqa")]  # another case at the same T: never compared with these
    lines = _lines(rows)
    long = lines["Fastest, long T (1024), no mask, fwd"]
    assert long.startswith("a, 1.50x faster than c"), long
    assert long.endswith("(2 ranked on T1024; not ranked: b (implausible), d (above a roof measured beside it); "
                         "not measured here: e)"), long
    assert lines["Fastest, short T (256), no mask, fwd"].startswith("b, 2.00x faster than a")
    assert lines["Cells left out or flagged"].startswith(
        "2 bench cell(s) left out of every ranking and speedup (1 implausible, 1 roof problem)")


def test_set_aside_lists_each_cell_that_ran_once_with_every_reason() -> None:
    rows = [_cell("a", 256, 1.0), _cell("a", 512, None, status="timeout", reason="stopped at 300 s"),
            _cell("b", 256, 1.0, iqr_over_median=0.25, pct_peak=130.0),
            _cell("c", 256, None, status="skipped", reason="no CPU kernel"),
            _cell("d", 256, 1.0, roof_problem="160% of the GEMM peak measured beside it: a measurement problem")]
    aside = trust.set_aside(pd.DataFrame(rows))
    assert list(zip(aside["implementation"], aside["counted"])) == [("a", "no"), ("d", "no"), ("b", "flagged")]
    assert aside["why"].iloc[0] == "timeout: stopped at 300 s"
    assert aside["why"].iloc[2] == ("above a measured roof (low roof reading or a suspect cell: no roof was read "
                                    "beside it to tell); noisy: IQR/median 25% (ranked only where its interval allows)")
    assert trust.summary(aside) == ("2 bench cell(s) left out of every ranking and speedup (1 roof problem, "
                                    "1 timeout); 1 counted but flagged (1 above a roof, 1 noisy)")
    assert trust.summary(trust.set_aside(pd.DataFrame([_cell("a", 256, 1.0)]))) is None


@pytest.fixture(scope="module")
def analysis(tmp_path_factory: pytest.TempPathFactory) -> Analysis:
    """benchmarks/report_trust.py's file (its T sweep): a cell dropped under load, a roof problem, a cell above the
    run's peak, a two-point sweep and an exponent at the fit's bound."""
    return analyse(load([write_document(tmp_path_factory.mktemp("trust") / "b.json", d_sweep=False)]), "honest")


def test_the_top_of_each_page_says_what_was_left_out_and_links_to_it(analysis: Analysis) -> None:
    page, summary = html.render(analysis, "t", []), markdown.render(analysis, "t", [])
    top = page.index('<section id="headline">')
    assert page.index('<a href="#set-aside">') < page.index(f'<section id="{trust.ANCHOR}">') < page.index("<h2>Runs")
    assert page.index("2 bench cell(s) left out of every ranking and speedup (1 implausible, 1 roof problem)") > top
    assert summary.index("**Cells left out or flagged:** 2 bench cell(s)") < summary.index(f"## {trust.TITLE}")
    assert f"(#{trust.MD_ANCHOR})" in summary and summary.index(f"## {trust.TITLE}") < summary.index("## Complexity")
    for implementation, case in (("rival", "B1-H4-T2048-d64-float32"), ("honest", "B1-H4-T1024-d64-float32")):
        assert f"| {implementation} | {case} | fwd |" in summary


def test_no_speedup_reads_a_cell_left_out(analysis: Analysis) -> None:
    speedup = analysis.speedup
    assert 1024 not in set(speedup["T"])  # the baseline's T = 1024 cell beat the roof beside it
    assert not ((speedup["implementation"] == "rival") & (speedup["T"] == 2048)).any()  # implausible


def test_too_few_points_is_no_fit_and_the_bound_is_undecided(analysis: Analysis) -> None:
    rows = {(r.implementation, r.quantity, r.axis): r for r in analysis.rows}
    short = rows[("short", "time", "T")]
    assert short.fit is None and short.slope is None and short.n == 2
    assert short.check == "too few points (2 < 3): no fit"
    capped = rows[("capped", "time", "T")]
    assert capped.fit is not None and capped.fit.at_bound == 4.0 and not capped.flagged
    assert capped.check == "undecided: exponent 4.00 at the fit's bound 4"
    summary = markdown.render(analysis, "t", [])
    assert f"| capped | time | T | 4 | [{capped.fit.low:.2f}, {capped.fit.high:.2f}] | 2 | undecided" in summary
    assert rows[("honest", "time", "T")].check == "ok" and rows[("honest", "memory", "T")].check == "ok"


def _fit(exponent: float, low: float, high: float, lower: tuple[int, ...] = (0, 1)) -> CostFit:
    xs = (256.0, 512.0, 1024.0, 2048.0)
    return CostFit(exponent=exponent, low=low, high=high, lower_terms=lower, coefs=(0.0,) * len(lower) + (1.0,),
                   xs=xs, ys=tuple(x ** exponent for x in xs), regimes=("lead",) * 4, r2=0.99)


def test_an_interval_wider_than_the_stated_width_is_undecided_and_one_within_it_is_ok() -> None:
    assert MAX_INTERVAL_WIDTH == 1.0
    wide = Row("k", "time", "T", 2.0, fit=_fit(2.0, 1.45, 2.55))
    assert wide.check == "undecided: interval [1.45, 2.55] wider than 1" and not wide.flagged
    assert Row("k", "time", "T", 2.0, fit=_fit(2.0, 1.55, 2.45)).check == "ok"
    floor = Row("k", "time", "T", 2.0, fit=_fit(1.1, 0.9, 1.3))  # the lowest exponent above the x term
    assert floor.fit is not None and floor.fit.at_bound == pytest.approx(1.1)


def test_a_fit_that_runs_into_the_cap_says_so() -> None:
    fit = fit_cost([256, 512, 1024, 2048], [1.0, 1.1, 3.0, 40.0], theory=2.0, drift=0.02, monotone=True)
    assert fit.exponent == pytest.approx(4.0) and fit.at_bound == 4.0
    assert Row("k", "time", "T", 2.0, fit=fit).check.startswith("undecided: exponent 4.00 at the fit's bound")


def test_a_stored_fit_of_two_points_is_shown_as_too_few() -> None:
    two = CostFit(exponent=2.0, low=1.9, high=2.1, lower_terms=(), coefs=(1.0,), xs=(256.0, 512.0),
                  ys=(1.0, 4.0), regimes=("lead", "lead"), r2=1.0)
    row = without_short_fit(Row("k", "time", "T", 2.0, fit=two))
    assert row.fit is None and row.n == 2 and row.check == "too few points (2 < 3): no fit"
    assert row.as_dict()["exponent"] is None


def test_a_percentage_above_a_roof_names_its_likely_cause() -> None:
    assert trust.above_roof({"pct_peak": 99.0}) is None
    assert trust.above_roof({"pct_peak": 130.0, "roof_problem": "160% of ...: a measurement problem"}).startswith(
        "suspect cell")
    assert trust.above_roof({"pct_peak": 130.0, "pct_peak_beside": 90.0}).startswith(
        "low roof reading: the run's roof was read low")
    assert "fits the caches" in str(trust.above_roof({"pct_bandwidth": 140.0, "bytes": ROOF_PROBLEM_BYTES / 4}))
    assert "narrower vector code" in str(trust.above_roof({"pct_peak_beside": 150.0}))
    assert trust.above_roof({"pct_peak": 130.0}) == "low roof reading or a suspect cell: no roof was read beside it to tell"


def test_every_table_that_shows_a_percentage_marks_one_above_its_roof(analysis: Analysis) -> None:
    bench = analysis.bench_table
    above = bench[bench["above_roof"].notna()]
    assert dict(zip(above["implementation"] + " " + above["case_id"], above["above_roof"])) == {
        "rival B1-H4-T512-d64-float32": "low roof reading or a suspect cell: no roof was read beside it to tell",
        "honest B1-H4-T1024-d64-float32": "suspect cell: faster than the roof read beside it in the same rounds"}
    shown = tables.marked(bench)
    marks = dict(zip(above["implementation"], zip(shown.loc[above.index, "pct_peak"],
                                                  shown.loc[above.index, "pct_peak_beside"])))
    assert marks["rival"][0] == "125!"
    assert marks["honest"] == (20.0, "160!")  # 20% of the run's peak, 160% of the GEMM read beside it
    page = html.render(analysis, "t", [])
    assert '<td class="num">125!</td>' in page and html.esc(trust.ROOF_FOOTNOTE) in page


def test_decode_and_terminal_tables_mark_a_share_above_the_roof() -> None:
    from harness.report.terminal import ROOF_NOTE, results_table
    from harness.results import BenchCell, Run

    frame = pd.DataFrame([{**CASE, "implementation": "k", "case_id": "decode", "tq": 1, "tk": 4096, "median": 1e-3,
                           "status": "ok", "gbps": 60.0, "pct_bandwidth": 120.0, "gflops": 1.0, "pct_peak": 5.0,
                           "bytes": float(ROOF_PROBLEM_BYTES * 2), "roof_problem": None},
                          {**CASE, "implementation": "beyond", "case_id": "decode", "tq": 1, "tk": 4096,
                           "median": 1e-4, "status": "ok", "gbps": 600.0, "pct_bandwidth": 1200.0, "gflops": 10.0,
                           "pct_peak": 50.0, "bytes": float(ROOF_PROBLEM_BYTES * 2),
                           "roof_problem": "1200% of the read bandwidth measured beside it: a measurement problem"}])
    report = Analysis(results=Results(bench=frame, verify=pd.DataFrame()), baseline="k", fits=(),
                      speedup=pd.DataFrame(), matrix=pd.DataFrame(), failures=pd.DataFrame(),
                      margins=pd.DataFrame(), noise=None, untrusted=pd.DataFrame(),  # type: ignore[arg-type]
                      bench_table=pd.DataFrame(), headline=())
    section = "\n".join(markdown._bandwidth_section(report))
    assert "| 120%! |" in section and "no roof was read beside it to tell" in section
    assert "| beyond |" not in section  # left out (listed among the cells set aside), never a decode result
    run = Run(run_id="r", command="bench", complete=True, environment={}, config={}, peaks={"float32/cpu": {"gflops": 10.0}},
              cells=(BenchCell(implementation="k", case={"tq": 64, "d": 16}, case_id="c", mode="fwd", status="ok",
                               stats={"median": 1e-3, "iqr_over_median": 0.01}, flops=1.2e7, gflops=12.0,
                               peak_key="float32/cpu"),))
    text = results_table(run)
    assert "120%!" in text and text.endswith(ROOF_NOTE)


def test_the_benchmark_keeps_its_output(tmp_path: Path) -> None:
    text = (Path(__file__).resolve().parent.parent / "benchmarks" / "report_trust.txt").read_text()
    assert text.rstrip().endswith("all 13 requirements met")
