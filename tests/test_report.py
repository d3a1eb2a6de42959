"""`attnbench report` on realistic result files: every artefact, the complexity table, escaping."""

from __future__ import annotations

import base64
import json
import struct
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest
from test_report_data import write_bench_run, write_verify_run

from harness.cli import main
from harness.errors import UsageError
from harness.report import ReportSettings, build_report
from harness.results import load_results, write_json_atomic

PLOTS = ("time_vs_T", "memory_vs_T", "time_vs_d", "time_vs_heads", "throughput_vs_T", "speedup_vs_T", "correctness")
EVIL = '<img src=x onerror="alert(1)">&"\'|'


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("results")
    return write_verify_run(d / "verify.json", broken=EVIL), write_bench_run(d / "bench.json")


@pytest.fixture(scope="module")
def report_dir(runs: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("reports") / "r1"
    assert main(["report", str(runs[0]), str(runs[1]), "--out", str(out)]) == 0
    return out


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return struct.unpack(">II", data[16:24])


def test_report_writes_html_markdown_plots_and_csv(report_dir: Path) -> None:
    assert (report_dir / "index.html").stat().st_size > 10_000
    assert (report_dir / "summary.md").read_text().startswith("# attnbench report")
    for name in PLOTS:
        width, height = png_size((report_dir / "plots" / f"{name}.png").read_bytes())
        assert width > 300 and height > 200, name
    for name in ("bench", "verify", "correctness", "complexity", "speedup"):
        assert not pd.read_csv(report_dir / f"{name}.csv").empty, name


def test_complexity_table_recovers_the_exponents_and_classes(report_dir: Path) -> None:
    table = pd.read_csv(report_dir / "complexity.csv")
    slope = {(r.implementation, r.quantity, r.axis): r.exponent for r in table.itertuples()}
    theory = {(r.implementation, r.quantity, r.axis): r.theory for r in table.itertuples()}
    for name in ("numpy_naive", "torch_eager", "tiled", "torch_sdpa"):
        assert slope[(name, "time", "T")] == pytest.approx(2.0, abs=0.1)
        assert slope[(name, "time", "d")] == pytest.approx(1.0, abs=0.1)
        assert slope[(name, "time", "heads")] == pytest.approx(1.0, abs=0.1)
    for name in ("numpy_naive", "torch_eager"):
        assert slope[(name, "memory", "T")] == pytest.approx(2.0, abs=0.1) and theory[(name, "memory", "T")] == 2
    for name in ("tiled", "torch_sdpa"):
        assert slope[(name, "memory", "T")] == pytest.approx(1.0, abs=0.15) and theory[(name, "memory", "T")] == 1
    assert not table["flagged"].any() and set(table["check"]) == {"ok"}
    assert (table["low"] < table["exponent"]).all() and (table["exponent"] < table["high"]).all()


def test_a_tiled_kernel_whose_memory_grows_as_t_squared_is_flagged(runs: tuple[Path, Path], tmp_path: Path) -> None:
    data = load_results(runs[1])
    for cell in data["cells"]:
        if cell["implementation"] == "tiled" and cell["memory"]:
            t, h = cell["case"]["tq"], cell["case"]["heads"]
            cell["memory"]["peak_extra_bytes"] = 4 * h * t * t  # a "tiled" kernel that materialises after all
    write_json_atomic(tmp_path / "bench.json", data)
    report = build_report(ReportSettings((tmp_path / "bench.json",), tmp_path / "out"))
    flagged = report.complexity[report.complexity["flagged"]]
    assert list(zip(flagged["implementation"], flagged["quantity"])) == [("tiled", "memory")]
    assert flagged["exponent"].iloc[0] == pytest.approx(2.0, abs=0.1)  # T² beside the O(T) output
    assert "⚠️ off" in report.summary.read_text()


def test_tiled_memory_that_tiles_dominate_is_within_its_bound(runs: tuple[Path, Path], tmp_path: Path) -> None:
    data = load_results(runs[1])
    for cell in data["cells"]:
        if cell["implementation"] == "tiled" and cell["memory"]:
            cell["memory"]["peak_extra_bytes"] = 5 * 2**20  # fixed-size tiles, far above the O(T) output
    write_json_atomic(tmp_path / "bench.json", data)
    table = build_report(ReportSettings((tmp_path / "bench.json",), tmp_path / "out")).complexity
    (row,) = table[(table["implementation"] == "tiled") & (table["quantity"] == "memory")].itertuples()
    # the fixed tiles are the model's constant and most of the memory at every T run: O(T) is not reached
    assert row.exponent == pytest.approx(1.0, abs=0.05) and not row.flagged
    assert row.check == "leading term not reached" and row.regimes.split() == ["fixed"] * 5


def test_correctness_matrix_shows_pass_fail_skipped_margin_and_ratio(report_dir: Path) -> None:
    rows = pd.read_csv(report_dir / "correctness.csv")
    cell = rows[(rows["implementation"] == EVIL) & (rows["group"] == "causal")].iloc[0]
    assert cell["status"] == "fail" and cell["worst_ratio"] == pytest.approx(41.5) and cell["n_fail"] == 2
    assert cell["worst_margin"] == pytest.approx(41.5e-6 / 2e-6)  # error / bound
    assert set(rows[rows["implementation"] == "xformers_memeff"]["status"]) == {"skipped"}
    tiled = rows[rows["implementation"] == "tiled"]
    assert set(tiled["status"]) == {"pass"} and (tiled["worst_margin"] <= 1).all()
    summary = (report_dir / "summary.md").read_text()
    assert "2 problem cell(s)" in summary and "err/bound 20.75, ×base 41.50" in summary
    assert "tiled 0.35 (dtypes)" in summary and "bound; 1 is the edge" in summary  # the headline's worst margins


def test_a_ratio_to_an_exact_baseline_is_never_shown(tmp_path: Path) -> None:
    from harness.case.attention import AttentionCase
    from harness.results import ResultWriter, VerifyCell

    writer = ResultWriter(tmp_path / "v.json", "verify", {"suite": "synthetic"})
    case = AttentionCase(heads=1, tq=16, d=8, dtype="float64")
    for i, (err, base) in enumerate(((6e-13, 4e-24), (2e-12, 1e-12))):  # a float64 baseline ~ exact; one that is not
        writer.append(VerifyCell(implementation="k", case=case.to_dict(), case_id=f"{case.id}-{i}", group="grad",
                                 check="output", status="pass",
                                 metrics={"max_abs_err": err, "base_err": base, "ratio": err / base, "m": 3,
                                          "floor": 1e-12, "bound": 3 * base + 1e-12}))
    writer.finish()
    cell = build_report(ReportSettings((tmp_path / "v.json",), tmp_path / "out")).matrix.at["k", "grad"]
    assert cell["worst_margin"] == pytest.approx(0.6) and cell["worst_ratio"] == pytest.approx(2.0)
    assert "err/bound ≤0.60, ×base ≤2.00" in cell["text"]


class PageScan(HTMLParser):
    """Every tag with its attributes, and the text, of an HTML page."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def test_html_is_self_contained_and_escapes_every_plugin_string(report_dir: Path) -> None:
    page = (report_dir / "index.html").read_text()
    scan = PageScan()
    scan.feed(page)
    images = [attrs for tag, attrs in scan.tags if tag == "img"]
    assert len(images) == len(PLOTS)
    for attrs in images:
        src = attrs["src"] or ""
        assert src.startswith("data:image/png;base64,"), src[:40]
        assert png_size(base64.b64decode(src.split(",", 1)[1]))[0] > 300
        assert "onerror" not in attrs
    assert not [t for t, _ in scan.tags if t in ("script", "link", "iframe", "object")]
    for _, attrs in scan.tags:
        for name in ("src", "href"):
            assert not (attrs.get(name) or "").startswith(("http:", "https:", "//")), attrs
    # the hostile implementation name is shown as text, never parsed as markup
    assert EVIL in "".join(scan.text)
    assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;&amp;&quot;&#x27;|" in page


def test_markdown_escapes_table_breaking_strings(report_dir: Path) -> None:
    summary = (report_dir / "summary.md").read_text()
    assert "&lt;img src=x onerror=\"alert(1)\"&gt;&amp;\"'\\|" in summary
    assert "<img" not in summary


def test_report_reads_pytest_benchmark_json(tmp_path: Path) -> None:
    benchmarks = []
    for t in (128, 256, 512, 1024):
        for name, speed in (("torch_sdpa", 1.0), ("numpy_naive", 4.0)):
            median = speed * 1e-9 * t * t
            benchmarks.append({
                "group": f"T{t}", "name": f"test_forward[{name}-T{t}]", "fullname": f"suites/performance/x.py::test_forward[{name}-T{t}]",
                "params": {"name": name}, "param": f"{name}-T{t}",
                "extra_info": {"implementation": name, "case_id": f"B1-H8-T{t}-d64-float32",  # as suites/performance
                               "shape": {"batch": 1, "heads": 8, "kv_heads": 8, "tq": t, "tk": t, "d": 64,
                                        "dtype": "float32", "device": "cpu", "causal": False, "mask": "none"},
                               "flops": 4 * 8 * t * t * 64},
                "stats": {"min": median * 0.9, "max": median * 1.2, "mean": median, "stddev": median * 0.05,
                          "rounds": 5, "median": median, "iqr": median * 0.04, "q1": median * 0.98, "q3": median * 1.02,
                          "data": [median * f for f in (0.97, 0.99, 1.0, 1.01, 1.03)]},
            })
    path = tmp_path / "pytest-bench.json"
    path.write_text(json.dumps({"machine_info": {"cpu": {"brand_raw": "Test CPU"}}, "commit_info": {},
                                "benchmarks": benchmarks, "datetime": "2026-11-21T10:00:00", "version": "5.2.3"}))
    report = build_report(ReportSettings((path,), tmp_path / "out"))
    time_t = report.complexity[(report.complexity["quantity"] == "time") & (report.complexity["axis"] == "T")]
    assert dict(zip(time_t["implementation"], time_t["exponent"].round(3))) == {"numpy_naive": 2.0, "torch_sdpa": 2.0}
    assert set(report.speedup[report.speedup["implementation"] == "numpy_naive"]["speedup"].round(3)) == {0.25}


def test_a_pytest_benchmark_cell_arrives_with_its_stats(tmp_path: Path) -> None:
    """Benchmarks saved with their data are summarised from that data by the reader, once: the typed cell carries
    the stats every consumer (tables, noise count, compare) reads, never half the file's summary and half the data;
    a summary that is not its data's is a damaged file."""
    from harness.analysis.stats import summarize
    from harness.report.load import load
    from harness.report.sources import load_run

    data = [3e-3, 1e-3, 2e-3, 4e-3, 2.5e-3]
    benchmarks = [{"name": "test_fwd[bare]", "param": "bare", "extra_info": {"implementation": "bare"},
                   "stats": {"data": data}},
                  {"name": "test_fwd[kept]", "param": "kept", "extra_info": {"implementation": "kept"},
                   "stats": {"median": 2.5e-3, "iqr": 0.7, "mean": 9.0, "rounds": 5, "data": data}}]
    path = tmp_path / "pytest-bench.json"
    path.write_text(json.dumps({"machine_info": {}, "commit_info": {}, "benchmarks": benchmarks}))
    bare, kept = load_run(path)[1].bench_cells()
    assert bare.stats == summarize(data) and bare.stats is not None and bare.stats.median == 2.5e-3
    assert kept.stats == summarize(data)  # the stored iqr and mean are not the data's: the data's are used
    assert list(load([path]).bench.sort_values("implementation")["median"]) == [2.5e-3, 2.5e-3]
    benchmarks[1]["stats"]["median"] = 7.0
    path.write_text(json.dumps({"machine_info": {}, "commit_info": {}, "benchmarks": benchmarks}))
    with pytest.raises(UsageError, match=r"benchmarks\[1\]\.stats\.median: 7\.0 is not the median of its data"):
        load_run(path)


def test_bad_input_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "x.json").write_text('{"hello": 1}')
    assert main(["report", str(tmp_path / "x.json"), "--out", str(tmp_path / "o")]) == 2
    assert "neither an attnbench result file" in capsys.readouterr().err
    assert main(["report", str(tmp_path / "missing.json")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_the_headline_names_the_machine_the_fastest_per_regime_and_the_failures(tmp_path: Path) -> None:
    from test_report_data import write_bench_run, write_verify_run

    write_bench_run(tmp_path / "bench.json")
    write_verify_run(tmp_path / "verify.json", broken="torch_eager")
    report = build_report(ReportSettings((tmp_path / "bench.json", tmp_path / "verify.json"), tmp_path / "out"))
    lines = {line.label: line.text for line in report.headline}
    assert "float32/cpu 175 GFLOP/s" in lines["Machine"]
    # synthetic speeds (s per unit of work): torch_sdpa 0.4e-10, then torch_eager 1.0e-10: 2.5x at T = 2048
    assert lines["Fastest, long T (2048), no mask, fwd"].startswith("torch_sdpa, 2.5")
    assert "faster than torch_eager ([" in lines["Fastest, long T (2048), no mask, fwd"]  # with its interval
    assert lines["Fastest, long T (2048), no mask, fwd"].endswith("(4 ranked on B1-H8-T2048-d64-float32)")
    assert lines["Verification failed"].startswith("torch_eager (") and "causal" in lines["Verification failed"]
    summary = report.summary.read_text()
    assert summary.index("## Headline") < summary.index("**Correctness:**")


def test_every_text_of_every_plot_stays_inside_its_rendered_figure(runs: tuple[Path, Path], tmp_path: Path) -> None:
    """Measured on the rendered canvas (each text's box in pixels), for every figure the report draws, plugin
    strings included."""
    report = build_report(ReportSettings(runs, tmp_path / "out"))
    assert len(report.plots) >= len(PLOTS)
    assert {p.name: p.texts_outside for p in report.plots if p.texts_outside} == {}


def test_a_figure_whose_labels_overflow_grows_until_they_fit() -> None:
    import matplotlib.pyplot as plt

    from harness.report.plots import fit_texts, texts_outside

    fig, ax = plt.subplots(figsize=(2, 1.5))
    ax.plot([1, 2], [1, 2])
    ax.set_xticks([1, 2], ["an implementation with a very long name indeed", "another long one"], rotation=30)
    ax.set_title("a title far wider than a two-inch figure can hold at this size")
    fig.canvas.draw()
    assert texts_outside(fig)
    assert fit_texts(fig) == () and not texts_outside(fig)
    plt.close(fig)


def test_history_shows_at_most_eight_commit_labels_the_first_and_the_last() -> None:
    from harness.report.history_view import MAX_TICKS, _tick_positions

    assert _tick_positions(5) == [0, 1, 2, 3, 4]
    many = _tick_positions(40)
    assert len(many) == MAX_TICKS and many[0] == 0 and many[-1] == 39
