"""The pytest-benchmark suite runs and writes what it promises (a real, short benchmark run)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # compiles, CLI subprocesses or whole verify runs: not in the inner loop

ROOT = Path(__file__).resolve().parent.parent


def test_performance_suite_writes_grouped_benchmarks_with_flops(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    # --benchmark-json alone turns benchmarking on, although addopts carry --benchmark-disable.
    cmd = [sys.executable, "-m", "pytest", "suites/performance", "-q", "-p", "no:cacheprovider",
           "--attnbench-only", "numpy_naive,torch_sdpa", "-k", "T256", "--benchmark-json", str(out),
           "--benchmark-min-rounds", "2", "--benchmark-max-time", "0.01", "--benchmark-warmup", "off"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}  # a worker's: not this run's
    proc = subprocess.run(cmd, check=False, cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    benchmarks = json.loads(out.read_text())["benchmarks"]
    assert {b["extra_info"]["implementation"] for b in benchmarks} == {"numpy_naive", "torch_sdpa"}
    for bench in benchmarks:
        assert bench["group"] == "B1-H4-T256-d64-float32"
        info = bench["extra_info"]
        assert info["flops"] == 4 * 1 * 4 * 256 * 256 * 64 and info["shape"]["tq"] == 256
        assert info["gflops"] > 0 and bench["stats"]["rounds"] >= 2
