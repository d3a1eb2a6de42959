"""`tiled_fused`: the compiled forward and backward against the oracle for any block size, in float32
and in bf16 on both paths (the bf16 units where the CPU has them, and the forced AVX2/float32 fallback),
its LSE and empty rows, and a build that fails or is never attempted without breaking anything.

The first test that needs the extension compiles it (about 25 s here, once per machine: torch caches
the build); on a machine where it cannot be built those tests skip with the compiler's reason.
"""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from tiled_cases import CASES as TILED_CASES
from tiled_cases import check_block_sizes

from harness.case.attention import AttentionCase
from harness.contract.discovery import load_registry
from harness.errors import UsageError
from harness.reference.oracle import reference_attention
from harness.reference.tensors import make_inputs, to_float64
from implementations import _cpp_build
from implementations import tiled_fused as module
from implementations._fused_kernels import forward as fused_forward

pytestmark = pytest.mark.tier  # results depend on the CPU's tier: CI runs it again capped (scripts/at_tier.py)

REGISTRY = load_registry()
CASES = [*TILED_CASES, AttentionCase(batch=1, heads=2, tq=40, d=16, dtype="bfloat16", causal=True)]


@pytest.fixture(scope="module")
def impl():
    reason = module.available()
    if reason is not None:
        pytest.skip(reason)
    return REGISTRY.get("tiled_fused")


TIERS = list(module.TIERS)


def _need(isa: str, dtype: torch.dtype = torch.bfloat16) -> None:
    """Skip unless this machine runs ``dtype`` on tier ``isa``'s kernels when asked to."""
    if isa and module.tier(dtype, isa) != isa:
        pytest.skip(f"{dtype} does not run on {isa} here: {module.bf16_reason(isa)}; {module.f32_reason(isa)}")


@pytest.mark.parametrize("isa", [*TIERS, ""], ids=[*TIERS, "default"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_any_block_size_matches_the_oracle(impl, case: AttentionCase, isa: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """On every tier this machine can run (``ATTNBENCH_FUSED_ISA`` caps it; each dtype runs on the best
    kernels of the tier for it) and on the default, the best."""
    monkeypatch.setenv(module.FORCE_ISA, isa)
    if isa and module.tier(torch.float32, isa) != isa and module.tier(torch.bfloat16, isa) != isa:
        pytest.skip(f"tier {isa} does not run here: {module.bf16_reason(isa)}")
    assert impl.declared.block_q and impl.declared.block_k and impl.declared.memory == "linear"
    inputs = make_inputs(case, seed=2)
    before = [x.clone() for x in (inputs.q, inputs.k, inputs.v)]
    check_block_sizes(impl, inputs, case, {"float64": 1e-11, "bfloat16": 3e-2}.get(case.dtype, 3e-6))
    for old, new in zip(before, (inputs.q, inputs.k, inputs.v)):
        assert torch.equal(old, new), "an input was modified"


def test_log_sum_exp_is_natural_and_empty_rows_are_zero(impl) -> None:
    case = AttentionCase(batch=1, heads=2, tq=30, tk=50, d=16, mask="empty_rows")
    inputs = make_inputs(case, seed=7)
    out, lse = module.fused_flash_attention(inputs.q, inputs.k, inputs.v, mask=inputs.mask, block_q=16, block_k=16)
    scores = (inputs.q64 @ inputs.k64.transpose(-1, -2)) / math.sqrt(case.d)
    expected = scores.masked_fill(~inputs.mask64, -math.inf).logsumexp(-1)
    empty = ~inputs.mask64.expand_as(scores).any(-1)
    assert empty.any() and (lse[empty] == -math.inf).all() and (out[empty] == 0).all()
    assert torch.allclose(lse[~empty].double(), expected[~empty], atol=1e-5)


@pytest.mark.parametrize("tq,tk", [(70, 30), (30, 70)])
def test_causal_is_top_left_as_in_tiled_when_lengths_differ(impl, tq: int, tk: int) -> None:
    """Query i sees keys j <= i (the harness's cases only have tq == tk; the kernels agree beyond)."""
    q, k, v = torch.randn(1, 2, tq, 16), torch.randn(1, 2, tk, 16), torch.randn(1, 2, tk, 16)
    allowed = torch.ones(tq, tk, dtype=torch.bool).tril()
    expected = reference_attention(q.double(), k.double(), v.double(), mask=allowed)
    out = impl(q, k, v, causal=True, block_q=16, block_k=16)
    assert (out.double() - expected).abs().max().item() < 3e-6


def test_causal_never_reads_key_blocks_above_the_diagonal(impl) -> None:
    """NaN keys and values past row 32: query blocks that end by row 32 never multiply them."""
    q, k, v = (torch.randn(1, 2, 64, 8) for _ in range(3))
    k[:, :, 32:] = float("nan")
    v[:, :, 32:] = float("nan")
    for block_q, block_k in [(16, 16), (32, 64), (16, 1024)]:
        out = impl(q, k, v, causal=True, block_q=block_q, block_k=block_k)
        assert torch.isfinite(out[:, :, :32]).all(), (block_q, block_k)


@pytest.mark.parametrize("case", [
    AttentionCase(batch=1, heads=4, kv_heads=2, tq=40, tk=45, d=16, mask="empty_rows", grad=True),
    AttentionCase(batch=2, heads=2, tq=50, d=16, causal=True, grad=True, layout="transposed"),
], ids=lambda c: c.id)
def test_float32_gradients_of_the_compiled_backward_match_the_oracle(impl, case: AttentionCase) -> None:
    inputs = make_inputs(case, seed=5)
    grad_out = torch.randn(case.batch, case.heads, case.tq, case.d, dtype=torch.float64)
    q64, k64, v64 = (x.clone().requires_grad_() for x in (inputs.q64, inputs.k64, inputs.v64))
    reference_attention(q64, k64, v64, causal=case.causal, mask=inputs.mask64, scale=case.scale).backward(grad_out)
    q, k, v = (x.detach().clone().requires_grad_() for x in (inputs.q, inputs.k, inputs.v))
    impl(q, k, v, **inputs.kwargs(case), block_q=16, block_k=32).backward(grad_out.float())
    for got, want in ((q.grad, q64.grad), (k.grad, k64.grad), (v.grad, v64.grad)):
        assert got.shape == want.shape
        assert (to_float64(got) - want).abs().max().item() < 1e-5 * max(1.0, want.abs().max().item())


ISAS = TIERS


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("case", [
    AttentionCase(batch=1, heads=4, kv_heads=2, tq=40, tk=45, d=16, dtype="bfloat16", mask="empty_rows", grad=True),
    AttentionCase(batch=2, heads=2, tq=70, d=24, dtype="bfloat16", causal=True, grad=True, layout="transposed"),
    AttentionCase(batch=1, heads=3, kv_heads=1, tq=33, d=7, dtype="bfloat16", causal=True, grad=True, scale=0.3),
], ids=lambda c: c.id)
def test_bf16_on_either_path_matches_the_oracle_with_gradients(impl, case: AttentionCase, isa: str) -> None:
    """Output and dQ, dK, dV within bf16 rounding of the float64 oracle, for several block sizes
    (odd d and key counts exercise the zero padding of the bf16 kernel's packed operands)."""
    _need(isa)
    inputs = make_inputs(case, seed=11)
    grad_out = torch.randn(case.batch, case.heads, case.tq, case.d).to(torch.bfloat16)
    q64, k64, v64 = (x.clone().requires_grad_() for x in (inputs.q64, inputs.k64, inputs.v64))
    want_out = reference_attention(q64, k64, v64, causal=case.causal, mask=inputs.mask64, scale=case.scale)
    want_out.backward(grad_out.double())
    for block_q, block_k in [(16, 16), (32, 64), (None, None)]:
        q, k, v = (x.detach().clone().requires_grad_() for x in (inputs.q, inputs.k, inputs.v))
        out, _ = module.fused_flash_attention(q, k, v, causal=case.causal, mask=inputs.mask, scale=case.scale,
                                              block_q=block_q, block_k=block_k, isa=isa)
        out.backward(grad_out)
        assert out.dtype == torch.bfloat16 and q.grad is not None and q.grad.dtype == torch.bfloat16
        for got, want in ((out, want_out), (q.grad, q64.grad), (k.grad, k64.grad), (v.grad, v64.grad)):
            err = (to_float64(got) - want).abs().max().item()
            assert err < 2e-2 * max(1.0, want.abs().max().item()), (isa, block_q, block_k, err)


def test_the_environment_variable_caps_the_tier(impl, monkeypatch: pytest.MonkeyPatch) -> None:
    bf16 = module.bf16_extension()
    avx2 = _cpp_build.cpu_runs(_cpp_build.ISAS["avx2"])
    monkeypatch.setenv(module.FORCE_ISA, "avx2")
    assert module.bf16_kernel() is False and "avx2" in (module.bf16_reason() or "")
    assert "avx2" in (module.f32_reason() or "")
    assert module.tier(torch.float32) == module.tier(torch.bfloat16) == ("avx2" if avx2 else "generic")
    monkeypatch.setenv(module.FORCE_ISA, "generic")
    assert module.tier(torch.float32) == module.tier(torch.bfloat16) == "generic"
    monkeypatch.setenv(module.FORCE_ISA, "sse9")
    with pytest.raises(UsageError, match="sse9"):
        module.bf16_kernel()
    monkeypatch.delenv(module.FORCE_ISA)
    assert module.bf16_kernel() is (not isinstance(bf16, str) and _cpp_build.cpu_runs(_cpp_build.ISAS["avx512_bf16"]))
    assert (module.f32_reason() is None) is (not isinstance(module.avx512_extension(), str)
                                             and _cpp_build.cpu_runs(_cpp_build.ISAS["avx512f"]))
    assert module.tier(torch.float64) == module.tier(torch.float16) == "generic"


@pytest.mark.parametrize("isa", ["generic", "avx2", "avx512f"])
def test_bf16_without_the_bf16_units_is_converted_as_it_loads(impl, isa: str) -> None:
    """On the avx2 and avx512f tiers the kernel reads bf16 and writes its output in bf16 (nothing
    converted whole); the generic path computes on a float32 copy and returns float32, converted after."""
    _need(isa)
    q, k, v = (torch.randn(1, 2, 50, 24).to(torch.bfloat16) for _ in range(3))
    seqs = module.sequences(50, 50, True, None, "top_left", None, None)
    out, lse = fused_forward(q, k, v, None, seqs, 0.2, 16, 16, isa)
    assert out.dtype == (torch.float32 if isa == "generic" else torch.bfloat16) and lse.dtype == torch.float32
    want = reference_attention(q.double(), k.double(), v.double(), causal=True, scale=0.2)
    assert (out.double() - want).abs().max().item() < 1e-2


def test_without_avx512_bf16_bf16_takes_the_float32_kernels_and_says_why(impl) -> None:
    """On a CPU without AVX512_BF16 (or capped below it), the bf16 extension is neither built nor loaded: bf16
    input runs on the float32 kernels, exact to bf16, and the reason names the missing features or the cap.
    (Its counterpart on a CPU with AVX512_BF16 breaks the build instead: the test after this one.)"""
    lacking = _cpp_build.missing(_cpp_build.ISAS["avx512_bf16"])
    if lacking is None:
        pytest.skip("this CPU runs the avx512_bf16 kernels: a failed build stands in for their absence (next test)")
    assert module.bf16_kernel() is False and isinstance(module.bf16_extension(), str)
    assert lacking in (module.bf16_reason() or ""), module.bf16_reason()
    assert module.tier(torch.bfloat16) == module.tier(torch.float32)
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 64, 32).to(torch.bfloat16) for _ in range(3))
    out = impl(q, k, v, causal=True)
    want = reference_attention(q.double(), k.double(), v.double(), causal=True)
    assert out.dtype == torch.bfloat16 and float((out.double() - want).abs().max()) < 2e-2


def test_a_failed_bf16_build_costs_only_the_bf16_fast_path(tmp_path: Path) -> None:
    """A compiler without AVX512_BF16 support fails the bf16 extension only: the float32 kernels stay
    available and bf16 input takes the float32 path, with the compiler's reason. Only where the CPU runs the
    avx512_bf16 kernels is a build attempted at all (elsewhere: the test before this one)."""
    lacking = _cpp_build.missing(_cpp_build.ISAS["avx512_bf16"])
    if lacking is not None:
        pytest.skip(f"no avx512_bf16 build is attempted here ({lacking}); the test before this one covers it")
    broken = tmp_path / "_flash_bf16.cpp"  # what an old compiler makes of the bf16 kernels: an error
    broken.write_text("#include <immintrin.h>\n__m512bh no_such_intrinsic() { return _mm512_no_such_bf16(); }\n")
    script = textwrap.dedent(f"""
        import torch
        from pathlib import Path
        from implementations import _cpp_build, _fused_kernels
        _fused_kernels.BF16_SOURCES = [Path({str(broken)!r})]
        real_build = _cpp_build.build
        _fused_kernels.build = lambda sources, name, flags, **kw: real_build(  # the broken build: not in torch's cache
            sources, name, flags, build_directory=Path({str(tmp_path / "build")!r}) if "bf16" in name else None, **kw)
        assert _fused_kernels.available() is None, "the float32 kernels are still available"
        print(_fused_kernels.bf16_reason())
        from harness.contract.discovery import load_registry
        impl = load_registry().get("tiled_fused")
        torch.manual_seed(0)
        q, k, v = (torch.randn(1, 2, 64, 32).to(torch.bfloat16) for _ in range(3))
        out = impl(q, k, v, causal=True)
        want = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=True)
        print(out.dtype, float((out.double() - want).abs().max()))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600,
                          cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 0, done.stderr
    reason, result = done.stdout.strip().splitlines()[-2:]
    assert reason.startswith("bf16 runs on the") and "avx512_bf16 kernels did not build" in reason and "error" in reason
    dtype, err = result.split()
    assert dtype == "torch.bfloat16" and float(err) < 2e-2


@pytest.mark.parametrize("isa", ISAS)
def test_bf16_error_does_not_grow_with_the_row_length(impl, isa: str) -> None:
    """Sums in float32: at T = 2048 the error stays within twice that of SDPA in bf16 (itself float32
    inside) plus a small floor; bf16 running sums (tests/verifier/plugins/broken_bf16_accumulate.py)
    are several times worse here."""
    _need(isa)
    torch.manual_seed(3)
    q, k, v = (torch.randn(1, 2, 2048, 64).to(torch.bfloat16) for _ in range(3))
    want = reference_attention(q.double(), k.double(), v.double(), causal=True)
    base = (torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True).double() - want).abs().max()
    out, _ = module.fused_flash_attention(q, k, v, causal=True, isa=isa)
    assert (out.double() - want).abs().max().item() <= 2 * base.item() + 2e-3


def test_bad_block_sizes_are_a_usage_error() -> None:
    q = torch.randn(1, 1, 8, 4)
    with pytest.raises(UsageError, match="block_q=-1"):
        REGISTRY.get("tiled_fused")(q, q, q, block_q=-1)


def test_a_failed_build_is_a_reason_naming_the_compiler_error(tmp_path: Path) -> None:
    source = tmp_path / "broken.cpp"
    source.write_text("int broken( {\n")
    reason = module.build(source, "attnbench_broken_probe", [], build_directory=tmp_path / "build")
    assert isinstance(reason, str) and reason.startswith("C++ extension did not build: ")
    assert "broken.cpp:1" in reason and "error" in reason


def test_discovery_and_import_never_compile() -> None:
    """A fresh interpreter loads every plugin and lists capabilities without building anything."""
    code = ("from harness.contract.discovery import load_registry\nimport implementations.tiled_fused as m\n"
            "impl = load_registry().get('tiled_fused')\nassert impl.capabilities()['grad']\n"
            "print(sorted(m._BUILD))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


STRUCTURED = [
    AttentionCase(heads=4, kv_heads=2, tq=70, d=16, window=(17, 5), grad=True),
    AttentionCase(heads=4, kv_heads=2, tq=70, d=16, causal=True, window=(9, 0), grad=True),
    AttentionCase(heads=2, tq=90, tk=37, d=16, causal=True, causal_align="bottom_right", window=(4, 0), grad=True),
    AttentionCase(batch=2, heads=2, tq=37, tk=90, d=16, window=(6, 3), causal_align="bottom_right",
                  mask="key_padding", grad=True),
    AttentionCase(heads=4, kv_heads=2, tq=28, tk=24, d=16, varlen=((3, 9), (0, 4), (12, 4), (2, 0), (11, 7)),
                  causal=True, causal_align="bottom_right", grad=True),
    AttentionCase(heads=2, tq=28, tk=24, d=16, varlen=((3, 9), (0, 4), (12, 4), (2, 0), (11, 7)), window=(2, 1),
                  mask="key_padding", grad=True),
    # Gemma 2's soft-cap (a cap of 2 bends most of these logits), on a global layer and on a local (windowed) one
    AttentionCase(heads=4, kv_heads=2, tq=70, d=16, causal=True, softcap=2.0, grad=True),
    AttentionCase(batch=2, heads=2, tq=37, tk=90, d=16, window=(6, 3), causal_align="bottom_right",
                  mask="key_padding", softcap=2.0, grad=True),
]


@pytest.mark.parametrize("path", ["float64", *(f"{dt}-{t}" for dt in ("float32", "bfloat16") for t in TIERS
                                              if (dt, t) not in (("float32", "avx512_bf16"), ("float32", "amx_bf16")))])
@pytest.mark.parametrize("case", STRUCTURED, ids=lambda c: c.id)
def test_structures_are_native_on_every_path_with_gradients(impl, case: AttentionCase, path: str) -> None:
    """Windows, bottom-right causal, packed sequences (with a sequence of no query and one of no key) and soft-capped
    logits through the C++ forward and backward of each dtype and ISA, against the oracle, for several blocks."""
    dtype, _, isa = path.partition("-")
    _need(isa, getattr(torch, dtype))
    case = case.with_(dtype=dtype)
    assert set(impl.declared.structures) == {"window", "bottom_right", "varlen"}
    inputs = make_inputs(case, seed=4)
    q64, k64, v64 = (x.clone().requires_grad_() for x in (inputs.q64, inputs.k64, inputs.v64))
    want = reference_attention(q64, k64, v64, **inputs.oracle_kwargs(case))
    grad_out = torch.randn(want.shape, dtype=torch.float64)
    want.backward(grad_out)
    tol = {"float64": 1e-12, "float32": 1e-5}.get(dtype, 2e-2)
    for block_q, block_k in [(16, 16), (32, 64), (None, None)]:
        q, k, v = (x.detach().clone().requires_grad_() for x in (inputs.q, inputs.k, inputs.v))
        out, _ = module.fused_flash_attention(q, k, v, **inputs.kwargs(case, impl.declared.structures), block_q=block_q,
                                              block_k=block_k, isa=isa or None)
        out.backward(grad_out.to(out.dtype))
        for got, ref in ((out, want), (q.grad, q64.grad), (k.grad, k64.grad), (v.grad, v64.grad)):
            err = (to_float64(got) - ref).abs().max().item()
            assert err < tol * max(1.0, ref.abs().max().item()), (block_q, block_k, err)


@pytest.mark.parametrize("isa", ISAS)
def test_key_blocks_outside_the_band_are_never_read(impl, isa: str) -> None:
    """NaN keys and values where no query of a block may look: a window's far past, another packed
    sequence. A kernel that multiplied them (even by a zero probability) would return NaN."""
    _need(isa)
    for dtype in ("float32", "bfloat16"):
        q, k, v = (torch.randn(1, 2, 128, 16).to(getattr(torch, dtype)) for _ in range(3))
        k[:, :, :32] = v[:, :, :32] = float("nan")
        for block_q, block_k in [(16, 16), (16, 64), (32, 1024)]:
            out, _ = module.fused_flash_attention(q, k, v, causal=True, window=(8, 0), block_q=block_q,
                                                  block_k=block_k, isa=isa)
            assert torch.isfinite(out[:, :, 32 + 8 + block_q:]).all(), (dtype, block_q, block_k)  # blocks past the NaNs
            cu = torch.tensor([0, 32, 128], dtype=torch.int32)
            out, _ = module.fused_flash_attention(q, k, v, causal=True, cu_seqlens_q=cu, cu_seqlens_k=cu,
                                                  block_q=block_q, block_k=block_k, isa=isa)
            assert torch.isfinite(out[:, :, 32:]).all(), (dtype, block_q, block_k)


@pytest.mark.parametrize("isa", ISAS)
def test_rows_after_the_last_packed_sequence_are_zero_with_lse_minus_inf(impl, isa: str) -> None:
    """The output, dK and dV are allocated uninitialised (a zero fill would be an OpenMP region): rows no
    sequence covers, here the padding after a packed batch, must still come back as zeros (and -inf
    LSE), never garbage."""
    _need(isa)
    for dtype in (torch.float32, torch.bfloat16, torch.float64):
        for _ in range(3):
            q, k, v = (torch.randn(1, 2, 40, 16).to(dtype).requires_grad_() for _ in range(3))
            cu = torch.tensor([0, 12, 30], dtype=torch.int32)
            garbage = torch.full((1, 2, 40, 16), float("nan"), dtype=torch.float32)
            del garbage  # freed memory the output's (and the gradients') allocation may reuse
            out, lse = module.fused_flash_attention(q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu, isa=isa)
            assert (out[:, :, 30:] == 0).all(), (dtype, isa)
            assert (lse[:, :, 30:] == -math.inf).all(), (dtype, isa)
            assert torch.isfinite(out[:, :, :30]).all(), (dtype, isa)
            out.backward(torch.randn_like(out))
            for grad in (q.grad, k.grad, v.grad):
                assert grad is not None and (grad[:, :, 30:] == 0).all(), (dtype, isa)
                assert torch.isfinite(grad).all(), (dtype, isa)
