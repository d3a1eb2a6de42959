"""`attnbench run`: verify failures make the exit status 1, and the report is still written."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.cli import main

BROKEN = '''
import torch
from harness import register


@register("wrong_scale", backend="torch", description="forgets the 1/sqrt(d) scale")
def wrong_scale(q, k, v, *, causal=False, mask=None, scale=None):
    return torch.softmax(q @ k.transpose(-1, -2), dim=-1) @ v
'''


def test_run_with_a_failing_plugin_exits_1_and_still_writes_the_report(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plugin = tmp_path / "broken.py"
    plugin.write_text(BROKEN)
    code = main(["run", "--plugin", str(plugin), "--only", "wrong_scale", "--skip-bench",
                 "--results-dir", str(tmp_path / "results"), "--reports-dir", str(tmp_path / "reports")])
    out = capsys.readouterr().out
    assert code == 1
    (report,) = (tmp_path / "reports").iterdir()
    assert f"report: {report / 'index.html'}" in out.splitlines()[-2]
    assert out.count("report: ") == 1
    (verify,) = (tmp_path / "results").glob("*-verify.json")
    assert verify.name.startswith(report.name)
    summary = (report / "summary.md").read_text()
    assert "problem cell(s)" in summary and "❌" in summary and "wrong_scale" in summary
    assert (report / "plots" / "correctness.png").exists() and (report / "correctness.csv").exists()


def test_run_refuses_bad_usage(tmp_path: Path) -> None:
    assert main(["run", "--plugin", str(tmp_path / "missing.py"), "--skip-bench",
                 "--results-dir", str(tmp_path / "r"), "--reports-dir", str(tmp_path / "p")]) == 2


def test_run_never_prints_a_report_path_it_did_not_write(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plugin = tmp_path / "broken.py"
    plugin.write_text(BROKEN)
    blocked = tmp_path / "reports"
    blocked.write_text("a file where the reports directory would go")
    code = main(["run", "--plugin", str(plugin), "--only", "wrong_scale", "--skip-bench",
                 "--results-dir", str(tmp_path / "results"), "--reports-dir", str(blocked)])
    captured = capsys.readouterr()
    assert code == 2, captured.err
    assert "report: " not in captured.out and "summary: " not in captured.out
    assert "no report was written (report exited 2)" in captured.err and "attnbench report " in captured.err
    assert list((tmp_path / "results").glob("*-verify.json"))  # the result file is kept
