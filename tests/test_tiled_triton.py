"""`tiled_triton`: the exact reason it cannot run without a GPU or the interpreter, and, under
TRITON_INTERPRET=1 in a subprocess (Triton reads the variable when kernels are defined),
forward and gradients against the oracle on tiny shapes."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harness.case.attention import AttentionCase
from harness.contract.discovery import load_registry
from harness.errors import UsageError

pytestmark = pytest.mark.slow  # compiles, CLI subprocesses or whole verify runs: not in the inner loop

pytest.importorskip("triton")
REGISTRY = load_registry()
ROOT = Path(__file__).resolve().parents[1]

SCRIPT = textwrap.dedent("""
    import torch
    from harness.case.attention import AttentionCase
    from harness.contract.discovery import load_registry
    from harness.reference.oracle import reference_attention
    from harness.reference.tensors import make_inputs, to_float64

    impl = load_registry().get("tiled_triton")
    cases = [
        AttentionCase(batch=2, heads=4, kv_heads=2, tq=20, tk=37, d=16, mask="empty_rows", grad=True),
        AttentionCase(batch=1, heads=2, tq=40, d=8, causal=True, layout="strided", grad=True),
        AttentionCase(batch=1, heads=2, tq=24, d=16, causal=True, dtype="float16", mask="key_padding", grad=True),
    ]
    for case in cases:
        assert not impl.not_supported_reasons(case), impl.not_supported_reasons(case)
        inputs = make_inputs(case, seed=3)
        q, k, v = (x.detach().clone().requires_grad_() for x in (inputs.q, inputs.k, inputs.v))
        out = impl(q, k, v, **inputs.kwargs(case), block_q=16, block_k=32)
        grad_out = torch.randn(out.shape, dtype=torch.float64)
        out.backward(grad_out.to(out.dtype))
        q64, k64, v64 = (x.clone().requires_grad_() for x in (inputs.q64, inputs.k64, inputs.v64))
        ref = reference_attention(q64, k64, v64, causal=case.causal, mask=inputs.mask64, scale=case.scale)
        ref.backward(grad_out)
        tol = 1e-5 if case.dtype == "float32" else 2e-2
        for got, want in ((out, ref), (q.grad, q64.grad), (k.grad, k64.grad), (v.grad, v64.grad)):
            assert got.dtype == q.dtype and got.shape == want.shape
            err = (to_float64(got) - want).abs().max().item()
            assert err < tol * max(1.0, want.abs().max().item()), (case.id, err)
    bf16 = AttentionCase(heads=2, tq=16, dtype="bfloat16")
    assert "no bfloat16" in " ".join(impl.not_supported_reasons(bf16))
    print("ok")
""")


def test_without_interpreter_or_gpu_the_reason_is_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    reasons = REGISTRY.get("tiled_triton").not_supported_reasons(AttentionCase(heads=2, tq=16))
    assert len(reasons) == 1 and "TRITON_INTERPRET=1" in reasons[0] and "'unset'" in reasons[0]


def test_block_sizes_must_suit_triton() -> None:
    with pytest.raises(UsageError, match="power of two >= 16"):
        REGISTRY.get("tiled_triton")(*([None] * 3), block_q=24)


@pytest.mark.slow
def test_kernels_match_the_oracle_under_the_interpreter() -> None:
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, "-c", SCRIPT], check=False, cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]


@pytest.mark.slow
def test_verify_small_suite_passes_under_the_interpreter(tmp_path: Path, attnbench) -> None:
    """`attnbench verify` as CI runs it without a GPU: the small shapes, gradients included."""
    done = attnbench("verify", "--only", "tiled_triton", "--suite", "small", "--trials", "1",
                     "--json", str(tmp_path / "verify.json"), cwd=ROOT, env={"TRITON_INTERPRET": "1"}, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "all passed" in done.stdout + done.stderr
