"""`attnbench compare` on real benchmark runs: a plugin that repeats its work 4 times is caught.

The plugin is a real file benchmarked for real by `attnbench bench` (a tiny shape, one thread, no
memory runs, the wall clock). The slowed copy registers the same name, so its cells line up with the base run's,
and it sleeps 20 ms per call: a floor on its time that no load can lower, against a base call of
microseconds, so the regression exists by construction, not by the machine being idle. Two runs of
the same code are *not* compared here: on a busy machine they may honestly differ by 40%.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli import main

pytestmark = pytest.mark.slow  # compiles, CLI subprocesses or whole verify runs: not in the inner loop

PLUGIN = '''
import time

import torch
from harness import register

SLEEP_S = {sleep_s}


@register("victim", backend="torch", description="matmul + softmax, then SLEEP_S idle")
def victim(q, k, v, *, causal=False, mask=None, scale=None):
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    out = torch.softmax((q @ k.transpose(-1, -2)) * scale, dim=-1) @ v
    if SLEEP_S:
        time.sleep(SLEEP_S)
    return out
'''


def bench(tmp_path: Path, name: str, sleep_s: float) -> Path:
    plugin = tmp_path / name / "victim.py"
    plugin.parent.mkdir()
    plugin.write_text(PLUGIN.format(sleep_s=sleep_s))
    out = tmp_path / f"{name}.json"
    code = main(["bench", "--plugin", str(plugin), "--only", "victim", "--T", "32", "--d", "16", "--heads", "1",
                 "--no-memory", "--threads", "1", "--clock", "wall",  # the wall clock: a sleep is on it, not on the CPU clock
                 "--roof-budget", "0.01", "--budget", "0.2", "--min-samples", "8", "--quiet", "--out", str(out)])
    assert code == 0
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("real")
    return {"base": bench(d, "base", 0), "slow": bench(d, "slow", 0.02)}


def test_a_run_against_itself_is_not_slower(runs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", str(runs["base"]), str(runs["base"])]) == 0
    assert "1 cells compared: 0 slower" in capsys.readouterr().out


def test_deliberately_slowed_plugin_is_reported_and_exits_1(runs: dict[str, Path],
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", str(runs["base"]), str(runs["slow"]), "--json"]) == 1
    result = json.loads(capsys.readouterr().out)
    (cell,) = result["cells"]
    assert cell["implementation"] == "victim" and cell["verdict"] == "slower"
    # decided on the ratio against the runs' own noise and load (no test on one run's samples): far beyond both
    assert cell["ratio"] > 2 and cell["method"] == "separate runs" and cell["low"] > 1.25, cell
    assert main(["compare", str(runs["slow"]), str(runs["base"])]) == 0  # faster is never a failure
