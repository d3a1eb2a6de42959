"""Flag values at the edges: a run that would do nothing says why, huge counts work or are refused clearly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from gates import finish

from harness.case.attention import AttentionCase
from harness.cli import main
from harness.results import load_results


def test_a_bench_that_plans_no_cell_says_why_and_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "decode.json"
    code = main(["bench", "--suite", "decode", "--T", "64", "--quiet", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2, err
    lines = [line for line in err.splitlines() if "error:" in line]
    assert len(lines) == 1 and "--T" in lines[0] and "decode" in lines[0], err
    assert not out.exists()


ZEROS = '''
import numpy as np
from harness import register


@register("zeros", backend="numpy")
def zeros(q, k, v, *, causal=False, mask=None, scale=None):
    return np.zeros_like(q)
'''


@pytest.mark.slow  # a verify command with a fuzz search
def test_verify_fuzz_takes_a_million_examples(tmp_path: Path, attnbench) -> None:
    """The search's time limit grows with N; past what a wait can express it is no limit, not an OverflowError.
    A saved failing case is replayed first, so the search ends at once whatever N is."""
    plugin = tmp_path / "zeros.py"
    plugin.write_text(ZEROS)
    database = tmp_path / ".hypothesis"
    database.mkdir()
    (database / "zeros.json").write_text(json.dumps([AttentionCase(tq=8, d=8).to_dict()]))
    out = tmp_path / "fuzz.json"
    code, _, err = finish(attnbench.start("verify", "--plugin", str(plugin), "--only", "zeros", "--fuzz", "1000000",
                                    "--json", str(out)))
    assert "Traceback" not in err and "OverflowError" not in err, err
    assert code == 1, err  # found a problem: the replayed case fails
    [cell] = load_results(out)["cells"]
    assert cell["status"] == "fail" and cell["metrics"]["replayed"], cell


@pytest.mark.slow  # a bench command that times hundreds of calls
def test_min_samples_above_the_usual_cap_is_honoured(tmp_path: Path, attnbench) -> None:
    out = tmp_path / "many.json"
    code, _, err = finish(attnbench.start("bench", "--only", "numpy_naive", "--T", "16", "--heads", "1", "--d", "8",
                                    "--roof-budget", "0.01", "--budget", "0.01", "--min-samples", "2000", "--no-memory", "--quiet",
                                    "--threads", "1", "--out", str(out)))
    assert code == 0, err
    [cell] = load_results(out)["cells"]
    assert len(cell["samples_s"]) == 2000
