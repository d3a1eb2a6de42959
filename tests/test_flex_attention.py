"""flex_attention: the structure as per-row key ranges (checked against the oracle's definition without
compiling anything), on-request selection, its reasons, and one compiled graph serving several structures
and shapes against the oracle (one compile, ~25 s cold here; inductor's cache makes it seconds after)."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from harness.case.attention import AttentionCase
from harness.contract.discovery import load_registry
from harness.reference.oracle import packed_allowed, reference_attention, structure_allowed
from harness.reference.tensors import make_inputs, to_float64
from implementations.flex_attention import key_ranges

pytestmark = pytest.mark.slow  # compiles, CLI subprocesses or whole verify runs: not in the inner loop

REGISTRY = load_registry()


@pytest.mark.parametrize("causal,window,align", [(False, None, "top_left"), (True, None, "top_left"),
                                                 (True, (3, 0), "bottom_right"), (False, (2, 4), "top_left"),
                                                 (False, (1, 1), "bottom_right")])
@pytest.mark.parametrize("seqlens", [None, ((3, 9), (0, 4), (12, 4), (2, 0), (7, 7))])
def test_key_ranges_are_the_allowed_keys(causal: bool, window: tuple | None, align: str, seqlens: tuple | None) -> None:
    tq, tk = (11, 17) if seqlens is None else (sum(a for a, _ in seqlens), sum(b for _, b in seqlens))
    if seqlens is None:
        want = structure_allowed(tq, tk, causal=causal, window=window, causal_align=align)
        want = torch.ones(tq, tk, dtype=torch.bool) if want is None else want
        cu_q = cu_k = None
    else:
        want = packed_allowed(seqlens, causal=causal, window=window, causal_align=align)
        cu_q, cu_k = ([0, *itertools.accumulate(p[i] for p in seqlens)] for i in (0, 1))
    lo, hi = key_ranges(tq, tk, causal, window, align, cu_q, cu_k)
    j = torch.arange(tk)[None, :]
    assert torch.equal((j >= lo[:, None]) & (j < hi[:, None]), want)


def test_it_runs_only_on_request_and_says_why_it_cannot() -> None:
    impl = REGISTRY.get("flex_attention")
    assert impl.declared.on_request and impl.capabilities()["on_request"]
    assert "flex_attention" not in [i.name for i in REGISTRY.select(None)]
    assert [i.name for i in REGISTRY.select(["flex_attention"])] == ["flex_attention"]
    assert set(impl.declared.structures) == {"window", "bottom_right", "varlen"}
    grad = impl.not_supported_reasons(AttentionCase(tq=8, d=16, grad=True))
    masked = impl.not_supported_reasons(AttentionCase(tq=8, d=16, mask="random"))
    if not torch.cuda.is_available():
        assert any("backward" in r and torch.__version__ in r for r in grad), grad  # PyTorch's own words
        assert any("mask" in r for r in masked), masked
    assert any("float64" in r for r in impl.not_supported_reasons(AttentionCase(tq=8, d=16, dtype="float64")))
    # cache lengths reach it folded into a boolean mask: the same CPU reason, not inductor's CppCompileError
    decode = impl.not_supported_reasons(AttentionCase(heads=4, kv_heads=1, tq=1, d=1, cache_seqlens=(0,)))
    if not torch.cuda.is_available():
        assert any("mask" in r for r in decode), decode


CASES = [
    AttentionCase(heads=2, tq=70, d=16, causal=True, window=(9, 0)),
    AttentionCase(heads=2, tq=37, tk=90, d=16, window=(6, 3), causal_align="bottom_right"),
    AttentionCase(heads=2, tq=90, tk=37, d=16, causal=True, causal_align="bottom_right"),
    AttentionCase(heads=2, tq=28, tk=24, d=16, varlen=((3, 9), (0, 4), (12, 4), (2, 0), (11, 7)), causal=True),
    AttentionCase(heads=2, tq=300, d=16, scale=0.3, varlen=((100, 100), (200, 200))),
    AttentionCase(heads=2, tq=50, d=11, causal=True, window=(5, 0)),
]


def test_one_graph_serves_every_structure_and_shape() -> None:
    impl = REGISTRY.get("flex_attention")
    if impl.not_supported_reasons(CASES[0]):
        pytest.skip("; ".join(impl.not_supported_reasons(CASES[0])))
    from torch._dynamo.utils import counters

    graphs = []
    for n, case in enumerate(CASES):
        inputs = make_inputs(case, seed=n)
        call = impl.prepare(inputs.q, inputs.k, inputs.v, **inputs.kwargs(case, impl.declared.structures))
        want = reference_attention(inputs.q64, inputs.k64, inputs.v64, **inputs.oracle_kwargs(case))
        err = (to_float64(call()) - want).abs().max().item()
        assert err < 1e-5, (case.id, err)
        graphs.append(counters["stats"]["unique_graphs"])
    # once for all structures and shapes (d = 11 is padded to 16), and once more for T over one 128-key
    # block (300): dynamo always specialises a size of 1, here the number of key blocks
    assert graphs[-1] - graphs[0] <= 1 and graphs[3] == graphs[0], graphs


SHORT_KEY_BLOCKS = [  # the last key block 8 mod 16 long: PyTorch's AVX2 template is wrong there at head dim 16
    AttentionCase(tq=8, tk=8, d=16, window=(1, 1)),
    AttentionCase(tq=1, tk=8, d=16),
    AttentionCase(heads=2, tq=5, tk=24, d=16, causal=True, causal_align="bottom_right"),
    AttentionCase(heads=2, tq=28, tk=24, d=16, varlen=((3, 9), (0, 4), (12, 4), (2, 0), (11, 7)), causal=True),
    AttentionCase(heads=2, tq=3, tk=136, d=8),
]


def _short_key_block_errors() -> list[tuple[str, float]]:
    impl = REGISTRY.get("flex_attention")
    errors = []
    for n, case in enumerate(SHORT_KEY_BLOCKS):
        inputs = make_inputs(case, seed=n)
        call = impl.prepare(inputs.q, inputs.k, inputs.v, **inputs.kwargs(case, impl.declared.structures))
        want = reference_attention(inputs.q64, inputs.k64, inputs.v64, **inputs.oracle_kwargs(case))
        errors.append((case.id, (to_float64(call()) - want).abs().max().item()))
    return errors


def test_short_key_blocks_are_exact() -> None:
    if REGISTRY.get("flex_attention").not_supported_reasons(SHORT_KEY_BLOCKS[0]):
        pytest.skip("flex_attention is not available here")
    errors = _short_key_block_errors()
    assert all(err < 1e-5 for _, err in errors), errors  # NaN fails too


@pytest.mark.slow
def test_short_key_blocks_are_exact_on_the_avx2_code_too(tmp_path: Path) -> None:
    """On a CPU with AVX-512, inductor compiles AVX-512 code; users mostly run the AVX2 code, where PyTorch's
    template has the fault: compile that too, in a fresh process with an empty inductor cache."""
    cpuinfo = Path("/proc/cpuinfo")
    if not cpuinfo.exists() or "avx512f" not in cpuinfo.read_text():
        pytest.skip("no AVX-512 here: the test above already ran the AVX2 code")
    if REGISTRY.get("flex_attention").not_supported_reasons(SHORT_KEY_BLOCKS[0]):
        pytest.skip("flex_attention is not available here")
    root = str(Path(__file__).parents[1])
    env = {**os.environ, "ATEN_CPU_CAPABILITY": "avx2", "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"),
           "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    code = "import test_flex_attention as t; print(repr(t._short_key_block_errors()))"
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=Path(__file__).parent, capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    errors = eval(done.stdout.strip().splitlines()[-1], {"nan": float("nan"), "inf": float("inf")})
    assert all(err < 1e-5 for _, err in errors), errors


SINKS_AND_SOFTCAP = [  # the sink as one more key: with GQA, a window, bottom-right alignment and the cap beside it
    AttentionCase(heads=4, kv_heads=2, tq=17, d=32, sinks=True, causal=True),
    AttentionCase(heads=2, tq=64, d=64, softcap=5.0, inputs="large"),
    AttentionCase(heads=2, tq=20, tk=30, d=32, softcap=2.0, sinks=True, causal=True, window=(3, 0),
                  causal_align="bottom_right"),
]


def test_softcap_and_sinks_match_the_oracle() -> None:
    impl = REGISTRY.get("flex_attention")
    assert impl.declared.sinks and impl.declared.softcap
    if impl.not_supported_reasons(SINKS_AND_SOFTCAP[0]):
        pytest.skip("; ".join(impl.not_supported_reasons(SINKS_AND_SOFTCAP[0])))
    for n, case in enumerate(SINKS_AND_SOFTCAP):
        inputs = make_inputs(case, seed=n)
        call = impl.prepare(inputs.q, inputs.k, inputs.v, **inputs.kwargs(case, impl.declared.structures))
        want = reference_attention(inputs.q64, inputs.k64, inputs.v64, **inputs.oracle_kwargs(case))
        err = (to_float64(call()) - want).abs().max().item()
        assert err < 1e-5, (case.id, err)
    assert impl.not_supported_reasons(SINKS_AND_SOFTCAP[0].with_(grad=True))  # gradients with sinks: refused
