"""A schema-v1 result file (the main job's, 2026-11-22, before the typed schema) still loads and
reports identically.

``tests/data/schema_v1`` holds that run's bench file, its verify file (gzip: 3 MB of JSON), and the
report the code of that day wrote from them (summary.md and the CSV tables; the HTML embeds
plots whose bytes vary with matplotlib, so it is left out). The report written now must match it
byte for byte, apart from the report's own path, except the cost-model fits of complexity.csv: those are
compared at the precision a fit means (:func:`_same_fit_rows`), since digits below it are decided by the
machine's BLAS kernel, which differs between CPUs.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import math
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from harness.cli import main
from harness.report.findings import analyse
from harness.report.load import load
from harness.report.markdown import HEADLINE

pytestmark = pytest.mark.tier  # results depend on the CPU's tier: CI runs it again capped (scripts/at_tier.py)

DATA = Path(__file__).resolve().parent.parent / "data" / "schema_v1"
SET_ASIDE = "## Cells set aside or flagged"
TABLES = ("summary.md", "bench.csv", "complexity.csv", "correctness.csv", "speedup.csv", "verify.csv")


def _unpack(tmp_path: Path) -> tuple[Path, Path]:
    bench = tmp_path / "b.json"
    shutil.copy(DATA / "main-job-bench.json", bench)
    verify = tmp_path / "v.json"
    verify.write_bytes(gzip.decompress((DATA / "main-job-verify.json.gz").read_bytes()))
    return bench, verify


def _golden(name: str) -> str:
    plain = DATA / "report" / name
    if plain.exists():
        return plain.read_text()
    return gzip.decompress((DATA / "report" / f"{name}.gz").read_bytes()).decode()


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("v1")
    bench, verify = _unpack(tmp)
    out = tmp / "golden"  # the report is titled by its directory
    assert main(["report", str(bench), str(verify), "--out", str(out)]) == 0
    return out


def _without_headline(markdown: str) -> str:
    """summary.md less the headline block and the cells set aside (both written after v1): the rest must not have
    changed."""
    lines = markdown.split("\n")
    if HEADLINE in lines:
        start = lines.index(HEADLINE)
        end = lines.index("", start)
        lines = lines[:start] + lines[end + 1:]
    if SET_ASIDE in lines:
        start = lines.index(SET_ASIDE)
        end = next(i for i, line in enumerate(lines) if i > start and line.startswith("**Correctness:**"))
        lines = lines[:start] + lines[end:]
    return "\n".join(lines)


EXPONENT_DIGITS = 0.0015
"""Exponents, their intervals and off_by are stored to 3 decimals: one unit of the last digit either way."""
PRINTED_RTOL = 0.005
"""A model's coefficients are printed to 3 significant digits: half a unit of the last one."""
PRINTED_EXPONENT = 0.005
"""Its exponents to 2 decimals. A coefficient trades off against its exponent's hidden digits, so two fits that
print the same exponent may print coefficients apart by up to a factor x^0.005 at the sweep's sizes x: the text
means no more than that. A lower-order coefficient that is a sliver of every predicted value (the constant of a
T^2 memory model) is not compared on its own: no fit determines it. The exponent columns (3 decimals) are compared
on their own, more tightly."""
TERM = re.compile(r"^(?P<c>[-+0-9.e]+)(?:·x(?:\^(?P<k>[-+0-9.e]+))?)?$")


def _model(text: str) -> list[tuple[float, float]]:
    """``941 + 33·x + 96·x^2.00`` -> [(941, 0), (33, 1), (96, 2.0)]."""
    if text in ("", "0"):
        return []
    terms = []
    for part in text.split(" + "):
        m = TERM.match(part)
        assert m, f"not a model term: {part!r} in {text!r}"
        terms.append((float(m["c"]), 0.0 if "·x" not in part else float(m["k"] or 1)))
    return terms


def _predict(terms: list[tuple[float, float]], x: float) -> float:
    return sum(c * x ** k for c, k in terms)


def _same_fit_rows(got: str, want: str, sizes: dict[tuple[str, str, str, str], tuple[float, ...]]) -> None:
    got_rows, want_rows = list(csv.DictReader(io.StringIO(got))), list(csv.DictReader(io.StringIO(want)))
    assert [list(r) for r in got_rows[:1]] == [list(r) for r in want_rows[:1]]
    assert len(got_rows) == len(want_rows)
    for g, w in zip(got_rows, want_rows):
        key = (g["implementation"], g["quantity"], g["axis"], g["sweep"])
        for column in g:
            if column in ("exponent", "low", "high", "off_by") and g[column] and w[column]:
                assert abs(float(g[column]) - float(w[column])) <= EXPONENT_DIGITS, (key, column, g[column], w[column])
            elif column == "r2" and g[column] and w[column]:
                assert math.isclose(float(g[column]), float(w[column]), abs_tol=2e-4), (key, g[column], w[column])
            elif column == "model":
                for x in sizes[key]:
                    a, b = _predict(_model(g[column]), x), _predict(_model(w[column]), x)
                    tolerance = 2 * PRINTED_RTOL + max(x, 1 / x) ** PRINTED_EXPONENT - 1
                    assert math.isclose(a, b, rel_tol=tolerance), (key, x, g[column], w[column])
            else:
                assert g[column] == w[column], (key, column)


@pytest.fixture(scope="module")
def fitted_sizes(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str, str, str], tuple[float, ...]]:
    """The sizes behind each complexity row, where its fitted models are compared."""
    bench, verify = _unpack(tmp_path_factory.mktemp("sizes"))
    analysis = analyse(load([bench, verify]), baseline="torch_sdpa")
    return {(r.implementation, r.quantity, r.axis, r.sweep): (r.fit.xs if r.fit else ())
            for f in analysis.fits for r in f.rows}


@pytest.mark.parametrize("name", TABLES)
def test_a_v1_run_reports_as_it_did(report: Path, name: str,
                                    fitted_sizes: dict[tuple[str, str, str, str], tuple[float, ...]]) -> None:
    if name == "complexity.csv":
        _same_fit_rows((report / name).read_text(), _golden(name), fitted_sizes)
    elif name == "bench.csv":  # less the above_roof column (written after v1)
        frame = pd.read_csv(report / name, keep_default_na=False, dtype=str).drop(columns="above_roof")
        assert frame.to_csv(index=False) == pd.read_csv(io.StringIO(_golden(name)), keep_default_na=False,
                                                        dtype=str).to_csv(index=False)
    else:
        assert _without_headline((report / name).read_text()) == _golden(name)


def test_a_v1_cell_above_its_measured_peak_is_marked(report: Path) -> None:
    """The v1 run's torch_sdpa at T = 256 ran at 101% of the GEMM peak measured at the run's start and end: its
    percentage is marked wherever it shows, and the top of the report counts it."""
    bench = pd.read_csv(report / "bench.csv")
    (row,) = bench[bench["above_roof"].notna()].itertuples()
    assert (row.implementation, row.case_id) == ("torch_sdpa", "B1-H8-T256-d64-float32") and row.pct_peak > 100
    assert "low roof reading or a suspect cell" in row.above_roof
    page = (report / "index.html").read_text()
    assert "<td class=\"num\">101!</td>" in page and "! above 100% of a roof measured in this run" in page
    assert "1 above a roof" in (report / "summary.md").read_text()


def test_fits_are_compared_at_their_precision() -> None:
    """The comparison above fails on a real change of a fit: another exponent, or a model predicting otherwise."""
    header = "implementation,quantity,axis,exponent,low,high,theory,off_by,flagged,check,dominates,regimes,model,r2,n,sweep\n"
    row = "a,memory,T,{e},1.9,2.1,2.0,0.0,False,ok,4 of 4 sizes,lead,{m},1.0,4,s\n"
    sizes = {("a", "memory", "T", "s"): (256.0, 512.0, 1024.0, 2048.0)}
    want = header + row.format(e="2.0", m="941 + 33·x + 96·x^2.00")
    _same_fit_rows(header + row.format(e="2.0", m="1.02e+03 + 32.4·x + 96·x^2.00"), want, sizes)
    with pytest.raises(AssertionError):
        _same_fit_rows(header + row.format(e="2.01", m="941 + 33·x + 96·x^2.00"), want, sizes)
    with pytest.raises(AssertionError):
        _same_fit_rows(header + row.format(e="2.0", m="941 + 33·x + 105·x^2.00"), want, sizes)


def test_the_v1_run_has_a_headline(report: Path) -> None:
    text = (report / "summary.md").read_text()
    assert text.index(HEADLINE) < text.index("**Correctness:**")
    assert "- **Machine:** " in text and "measured GEMM peak float32/cpu" in text
    # noise never decides a headline: this run's cells at T = 2048 are too noisy to name one fastest
    assert "- **Fastest, long T (2048), no mask, fwd:** torch_sdpa and torch_sdpa_flash tied within noise" in text
    assert "- **Verification:** all 16 verified implementation(s) passed every check" in text, text[:1500]
    assert '<section id="headline">' in (report / "index.html").read_text()


def test_a_v1_bench_file_compares(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bench, _ = _unpack(tmp_path)
    assert main(["compare", str(bench), str(bench), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["slower"] == 0 and len(result["cells"]) == 48 and not result["failed"]
