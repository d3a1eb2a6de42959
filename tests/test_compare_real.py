"""`attnbench compare` on real benchmark runs: a plugin that repeats its work 4 times is caught.

The plugin is a real file benchmarked for real by `attnbench bench` (a tiny shape, one thread so
that the busy 2-core machine disturbs it less, no memory runs). The slowed copy registers the
same name, so its cells line up with the base run's.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli import main

PLUGIN = '''
import torch
from harness import register

REPEAT = {repeat}


@register("victim", backend="torch", description="matmul + softmax, computed REPEAT times")
def victim(q, k, v, *, causal=False, mask=None, scale=None):
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    for _ in range(REPEAT):
        out = torch.softmax((q @ k.transpose(-1, -2)) * scale, dim=-1) @ v
    return out
'''


def bench(tmp_path: Path, name: str, repeat: int) -> Path:
    plugin = tmp_path / name / "victim.py"
    plugin.parent.mkdir()
    plugin.write_text(PLUGIN.format(repeat=repeat))
    out = tmp_path / f"{name}.json"
    code = main(["bench", "--plugin", str(plugin), "--only", "victim", "--T", "256", "--d", "64", "--heads", "4",
                 "--no-memory", "--threads", "1", "--budget", "0.2", "--quiet", "--out", str(out)])
    assert code == 0
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("real")
    return {"base": bench(d, "base", 1), "again": bench(d, "again", 1), "slow": bench(d, "slow", 4)}


def test_same_code_twice_is_no_regression(runs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", str(runs["base"]), str(runs["again"])]) == 0
    assert "1 cells compared: 0 regression(s)" in capsys.readouterr().out


def test_deliberately_slowed_plugin_is_reported_and_exits_1(runs: dict[str, Path],
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", str(runs["base"]), str(runs["slow"]), "--json"]) == 1
    result = json.loads(capsys.readouterr().out)
    (cell,) = result["cells"]
    assert cell["implementation"] == "victim" and cell["verdict"] == "regression"
    assert cell["ratio"] > 2 and cell["p_value"] < 0.001, cell
