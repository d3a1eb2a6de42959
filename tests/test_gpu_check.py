"""scripts/gpu_check.sh's logic, run here as its dry run: every step's CPU stand-in, its time limit, its summary.

The check itself runs on a GPU machine (docs/benchmarking.md, "On a GPU"); what can be checked without one is
that it runs its steps in order, records each one's status and findings, stays inside its deadline, skips what
it has no time for, and leaves only the files the device tool brings back (at most 8, at most 2 folders down).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import gpu_check  # noqa: E402

STEP_NAMES = [step.name for step in gpu_check.steps(Path("/nonexistent"))]


def dry_run(out: Path, *extra: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_check.sh"), "--dry-run", "--out", str(out), *extra],
                          capture_output=True, text=True, timeout=1200)
    return proc, json.loads((out / "summary.json").read_text())


@pytest.fixture(scope="module")
def full(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], dict[str, Any], Path]:
    out = tmp_path_factory.mktemp("gpu_check")
    proc, summary = dry_run(out, "--deadline", "1100")
    return proc, summary, out


@pytest.mark.slow
def test_the_dry_run_records_every_step_in_order(full: Any) -> None:
    proc, summary, _ = full
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert summary["mode"] == "dry-run" and summary["why_dry"]
    assert [s["name"] for s in summary["steps"]] == STEP_NAMES
    for step in summary["steps"]:
        assert step["status"] in gpu_check.STATUSES
        assert step["status"] == "ok" or step["reason"], step
    by_name = {s["name"]: s for s in summary["steps"]}
    for cuda_only in ("verify_triton", "verify_flex"):
        assert by_name[cuda_only]["status"] == "skipped" and "CUDA" in by_name[cuda_only]["reason"]
    assert summary["elapsed_s"] <= summary["deadline_s"]
    assert "gpu_check (dry-run" in proc.stdout  # the closing table


@pytest.mark.slow
def test_each_steps_findings_come_from_its_result_file(full: Any) -> None:
    _, summary, _ = full
    f = {s["name"]: s["findings"] for s in summary["steps"]}
    assert f["environment"]["torch"] and f["environment"]["cuda_available"] is False
    assert f["list"]["implementations"]["torch_sdpa"]["available"] is True
    assert f["list"]["implementations"]["torch_sdpa_cudnn"]["devices"] == ["cuda"]
    machine = f["sdpa_tflops"]["machine"]
    assert machine["gemm_peak_tflops"] > 0 and machine["read_gbps"] > 0
    refused = [b for b in f["sdpa_tflops"]["backends"] if "error" in b]
    assert {b["backend"] for b in refused} >= {"CUDNN_ATTENTION"}  # a CUDA-only kernel, refused on the CPU
    counts = f["verify_sdpa"]["counts"]
    assert set(counts["torch_sdpa_math/cpu"]) == {"pass"}
    assert set(counts["torch_sdpa_cudnn/cuda"]) == {"skipped"} and "CUDA" in f["verify_sdpa"]["skipped_because"][
        "torch_sdpa_cudnn/cuda"]
    (cell,) = f["bench"]["cells"]
    assert cell["status"] == "ok" and cell["median_ms"] > 0 and cell["checked"], cell
    verdicts = f["integrity"]["verdicts"]
    assert set(verdicts) == set(gpu_check._expected())
    assert all(v["status"] == "skipped" and not v["as_expected"] for v in verdicts.values())  # no CUDA: not run
    assert f["pytest_cuda"]["tests"] >= 5 and f["pytest_cuda"]["skipped"] == f["pytest_cuda"]["tests"]


@pytest.mark.slow
def test_only_what_the_device_tool_brings_back_is_left(full: Any) -> None:
    _, summary, out = full
    files = [p for p in out.rglob("*") if p.is_file()]
    assert sorted(p.name for p in files) == sorted(summary["files"])
    assert len(files) <= 8 and all(len(p.relative_to(out).parts) <= 3 for p in files)
    with tarfile.open(out / "results.tar.gz") as tar:
        names = set(tar.getnames())
    assert {"verify_sdpa.json", "bench_cuda.json", "pytest_cuda.xml", "list.json"} <= names
    log = (out / "steps.log").read_text()
    assert all(f"===== {s['name']}:" in log for s in summary["steps"] if s["status"] != "skipped")


def test_steps_past_the_deadline_are_skipped_and_said_so(tmp_path: Path) -> None:
    proc, summary = dry_run(tmp_path, "--deadline", "1")
    assert proc.returncode == 0, proc.stderr
    assert [s["name"] for s in summary["steps"]] == STEP_NAMES
    ran = [s for s in summary["steps"] if "dry run" not in (s["reason"] or "")]
    assert ran and all(s["status"] == "skipped" and s["reason"].startswith("out of time") for s in ran)


def test_a_step_cut_off_at_its_limit_is_a_timeout_and_the_next_step_runs(tmp_path: Path) -> None:
    step = gpu_check.Step("sleeper", "sleeps", [], 1.0)
    with open(tmp_path / "log", "w") as log:
        status, rc, reason = gpu_check.run_step(step, [sys.executable, "-c", "import time; time.sleep(60)"], 1.0,
                                                log, {"PATH": "/usr/bin:/bin"})
        assert (status, rc) == ("timeout", None) and "1 s" in (reason or "")
        status, rc, reason = gpu_check.run_step(step, [sys.executable, "-c", "raise SystemExit(3)"], 10.0, log,
                                                {"PATH": "/usr/bin:/bin"})
    assert (status, rc, reason) == ("failed", 3, "exit status 3")


def test_an_unknown_step_is_a_usage_error(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_check.py"), "--dry-run", "--out", str(tmp_path),
                           "--steps", "nonesuch"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "nonesuch" in proc.stderr
