"""A check that cannot fail is no check: non-finite references and bounds, calls that write into their inputs,
outputs of the wrong dtype, and flags that select nothing or oversubscribe the CPUs."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from harness.case.attention import AttentionCase
from harness.contract.registry import register
from harness.reference.tolerance import compare
from harness.verify.properties import slices

PLUGIN = '''
import torch
import harness

@harness.register("nan_k_once", backend="torch", dtypes=("float32",))
def nan_k_once(q, k, v, causal=False, mask=None, scale=None):
    """Writes NaN into its k once, then returns zeros: the reference becomes NaN, which no bound may pass."""
    if not getattr(nan_k_once, "done", False):
        k.fill_(float("nan"))
        nan_k_once.done = True
    return torch.zeros_like(q)

@harness.register("wrong_dtype", backend="torch", dtypes=("float32",))
def wrong_dtype(q, k, v, causal=False, mask=None, scale=None):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale).double()

@harness.register("writes_q", backend="torch", dtypes=("float32",))
def writes_q(q, k, v, causal=False, mask=None, scale=None):
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
    q[0, 0, 0, 0] += 1.0
    return out
'''


def test_an_all_nan_reference_fails_with_its_reason() -> None:
    oracle = torch.full((1, 1, 4, 8), float("nan"), dtype=torch.float64)
    verdict = compare(torch.zeros_like(oracle), oracle, torch.zeros_like(oracle), dtype="float32", m=2.0)
    assert not verdict.ok
    assert "NaN/Inf" in (verdict.reason or "") and "reference" in (verdict.reason or "")


def test_one_infinite_reference_value_fails() -> None:
    oracle = torch.zeros((1, 1, 4, 8), dtype=torch.float64)
    oracle[0, 0, 2, 3] = float("inf")
    verdict = compare(torch.zeros_like(oracle), oracle, torch.zeros_like(oracle), dtype="float32", m=2.0)
    assert not verdict.ok and "[0, 0, 2, 3]" in (verdict.reason or "")


@pytest.mark.parametrize("logit_max", [float("inf"), float("nan")])
def test_a_non_finite_bound_fails(logit_max: float) -> None:
    oracle = torch.ones((1, 1, 4, 8), dtype=torch.float64)
    verdict = compare(oracle.clone(), oracle, oracle.clone(), dtype="float32", m=2.0, logit_max=logit_max)
    assert not verdict.ok and "bound" in (verdict.reason or "")


def test_a_finite_match_still_passes() -> None:
    oracle = torch.ones((1, 1, 4, 8), dtype=torch.float64)
    assert compare(oracle.clone(), oracle, oracle.clone(), dtype="float32", m=2.0).ok


def test_the_slices_property_fails_an_all_nan_output() -> None:
    def all_nan(q, k, v, *, causal=False, mask=None, scale=None):  # type: ignore[no-untyped-def]
        return torch.full_like(q, float("nan"))

    impl = register("all_nan_for_slices", backend="torch", dtypes=("float32",))(all_nan).__attnbench__
    result = slices(impl, AttentionCase(batch=1, heads=2, tq=8, tk=8, d=8, dtype="float32"))
    assert result.status != "pass", result


@pytest.mark.slow
def test_bench_holds_input_writes_nan_references_and_output_dtypes(tmp_path: Path, attnbench) -> None:
    plugin = tmp_path / "bad_kernels.py"
    plugin.write_text(PLUGIN)
    out = tmp_path / "b.json"
    done = attnbench("bench", "--plugin", str(plugin), "--only", "nan_k_once,wrong_dtype,writes_q", "--T", "32",
                      "--d", "16", "--heads", "1", "--dtype", "float32", "--mode", "fwd", "--causal", "off",
                      "--no-memory", "--roof-budget", "0.01", "--budget", "0.05", "--out", str(out), "--quiet")
    assert done.returncode == 1, done.stderr
    cells = {c["implementation"]: c for c in json.loads(out.read_text())["cells"]}
    assert cells["nan_k_once"]["status"] == "violation", cells["nan_k_once"]
    assert "wrote into its input(s) k" in cells["nan_k_once"]["reason"]
    assert cells["writes_q"]["status"] == "violation" and "wrote into its input(s) q" in cells["writes_q"]["reason"]
    assert cells["wrong_dtype"]["status"] == "wrong" and "output dtype float64" in cells["wrong_dtype"]["reason"]


@pytest.mark.parametrize("command", ["verify", "bench", "list"])
def test_an_empty_only_is_a_usage_error(command: str, attnbench) -> None:
    argv = [command, "--only", ""] if command != "list" else [command, ""]
    done = attnbench(*argv, timeout=120)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "names no implementation" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.slow
def test_more_threads_than_cpus_is_said(tmp_path: Path, attnbench) -> None:
    plugin = tmp_path / "bad_kernels.py"
    plugin.write_text(PLUGIN)
    cpus = len(os.sched_getaffinity(0))
    # float64 cells of a float32-only kernel are skipped: nothing runs 1000 threads, the warning is the test
    done = attnbench("bench", "--plugin", str(plugin), "--only", "wrong_dtype", "--T", "16", "--dtype", "float64",
                      "--threads", str(cpus + 1000), "--out", str(tmp_path / "b.json"), "--quiet")
    assert done.returncode == 0, done.stderr
    assert f"--threads {cpus + 1000} but this process may use {cpus} CPU(s)" in done.stderr
