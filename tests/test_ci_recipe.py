"""The CI recipe (docs/ci/bench-compare.sh, which docs/ci/attnbench-pr.yml runs) run for real: the
head is a deliberately slowed copy of the base plugin, so the job must fail and say why in the
job summary.

The slowed copy sleeps 20 ms per call against a base call of microseconds: the regression exists
by construction, whatever the load on the machine.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # subprocesses and workers that import torch: not in the inner loop

ROOT = Path(__file__).resolve().parent.parent
RECIPE = ROOT / "docs" / "ci" / "bench-compare.sh"
PLUGIN = '''
import time

from harness import register


@register("victim", backend="torch", description="q @ k^T softmax @ v, then {sleep_s} s idle")
def victim(q, k, v, *, causal=False, mask=None, scale=None):
    import torch

    scale = q.shape[-1] ** -0.5 if scale is None else scale
    out = torch.softmax((q @ k.transpose(-1, -2)) * scale, dim=-1) @ v
    time.sleep({sleep_s})
    return out
'''


def _checkout(root: Path, sleep_s: float) -> Path:
    root.mkdir()
    plugin = root / "victim.py"
    plugin.write_text(PLUGIN.format(sleep_s=sleep_s))
    return plugin


def test_the_recipe_fails_a_slowed_head_and_writes_the_job_summary(tmp_path: Path) -> None:
    base, head = _checkout(tmp_path / "base", 0.0), _checkout(tmp_path / "head", 0.02)
    summary = tmp_path / "step-summary.md"
    summary.write_text("# earlier steps\n")
    env = {**os.environ, "GITHUB_STEP_SUMMARY": str(summary),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    run = subprocess.run(["bash", str(RECIPE), str(base), str(head), str(tmp_path / "out"), "--only", "victim",
                          "--T", "32", "--d", "16", "--heads", "1", "--no-memory", "--threads", "1",
                          "--budget", "0.2", "--min-samples", "8"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 1, run.stdout + run.stderr
    assert {p.name for p in (tmp_path / "out").iterdir()} >= {"base.json", "head.json", "compare.md"}
    text = summary.read_text()
    assert text.startswith("# earlier steps\n") and "victim" in text and "regression" in text.lower(), text


def test_the_recipe_says_how_to_call_it() -> None:
    run = subprocess.run(["bash", str(RECIPE)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and "usage: bench-compare.sh BASE_PLUGIN HEAD_PLUGIN OUT_DIR" in run.stderr
