"""A schema-v1 result file (the main job's, 2026-11-22, before the typed schema) still loads and
reports identically.

``tests/data/schema_v1`` holds that run's bench file, its verify file (gzip: 3 MB of JSON), and the
report the code of that day wrote from them (summary.md and the CSV tables; the HTML embeds
plots whose bytes vary with matplotlib, so it is left out). The report written now must match it
byte for byte, apart from the report's own path.
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from harness.cli import main
from harness.report.markdown import HEADLINE

DATA = Path(__file__).resolve().parent.parent / "data" / "schema_v1"
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
    """summary.md less the headline block (written after v1): the rest must not have changed."""
    lines = markdown.split("\n")
    if HEADLINE in lines:
        start = lines.index(HEADLINE)
        end = lines.index("", start)
        lines = lines[:start] + lines[end + 1:]
    return "\n".join(lines)


@pytest.mark.parametrize("name", TABLES)
def test_a_v1_run_reports_as_it_did(report: Path, name: str) -> None:
    assert _without_headline((report / name).read_text()) == _golden(name)


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
    assert result["regressions"] == 0 and len(result["cells"]) == 48 and not result["failed"]
