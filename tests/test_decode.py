"""Decode with a KV cache: ragged cache lengths and paged caches as case data, folded for the
implementations that do not take them, in the oracle, FLOPs and bytes; tiled_decode and decode_numpy
against the oracle; the bandwidth roof in result files and reports."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import torch

from harness.bench.sweeps import DECODE_MAIN, plan, sweep_cases
from harness.case.attention import AttentionCase
from harness.case.decode import compulsory_keys, decode_fields, ragged_lengths
from harness.case.paging import gather_pages
from harness.contract.discovery import load_registry
from harness.contract.registry import make_implementation
from harness.errors import PluginError, UsageError
from harness.reference.flops import attention_flops, compulsory_bytes
from harness.reference.oracle import reference_attention
from harness.reference.tensors import make_inputs, to_float64
from harness.results.schema import BenchCell, Run, Status

pytestmark = pytest.mark.tier  # results depend on the CPU's tier: CI runs it again capped (scripts/at_tier.py)

REGISTRY = load_registry()


def _brute(case: AttentionCase) -> torch.Tensor:
    """(B, 1, Tq, Tk) by the definition, one pair at a time: element b's query t sits at t + L_b - Tq."""
    out = torch.zeros(case.batch, 1, case.tq, case.tk, dtype=torch.bool)
    lengths = case.cache_seqlens or (case.tk,) * case.batch
    for b, t, j in itertools.product(range(case.batch), range(case.tq), range(case.tk)):
        i = t + (lengths[b] - case.tq if case.causal_align == "bottom_right" else 0)
        out[b, 0, t, j] = j < lengths[b] and (not case.causal or j <= i)
    return out


def test_ids_and_validation() -> None:
    case = AttentionCase(**decode_fields(3, 8, 2, 40, tq=4), cache_seqlens=(40, 3, 0), page_size=16)
    assert case.id == "B3-H8/2-T4x40-d128-float32-causal-bottom_right-cache=40,3,0-paged=16"
    assert case.structures == {"bottom_right", "cache_seqlens", "paged"}
    again = AttentionCase.from_dict({**case.to_dict(), "cache_seqlens": [40, 3, 0]})  # as JSON reads it
    assert again == case
    long = AttentionCase(**decode_fields(64, 32, 8, 4096, ragged=True))
    assert "cache=" in long.id and "#" in long.id and len(long.id) < 80  # 64 lengths summarised
    for fields, phrase in (({"cache_seqlens": (5,)}, "one per batch element"), ({"cache_seqlens": (9, 1)}, "0..tk"),
                           ({"page_size": 0}, "page_size"), ({"page_size": 4, "grad": True}, "forward-only")):
        with pytest.raises(UsageError, match=phrase):
            AttentionCase(batch=2, tq=1, tk=8, **fields)
    assert ragged_lengths(8, 1000) == ragged_lengths(8, 1000) and max(ragged_lengths(8, 1000)) == 1000


def test_pages_are_shuffled_and_the_oracle_gathers_them() -> None:
    case = AttentionCase(batch=3, heads=4, kv_heads=2, tq=1, tk=37, d=8, page_size=8)
    inputs = make_inputs(case, 1)
    assert inputs.k_pages.shape == (3 * 5 + 1, 2, 8, 8) and inputs.block_table.shape == (3, 5)
    table = inputs.block_table.flatten().tolist()
    assert sorted(table) != table and len(set(table)) == 15  # shuffled, every page once
    assert torch.equal(gather_pages(inputs.k_pages, inputs.block_table, 37), inputs.k)
    assert torch.equal(gather_pages(inputs.v_pages, inputs.block_table, 37), inputs.v)
    last = inputs.k_pages[inputs.block_table[:, -1].long()][:, :, 5:]  # past Tk = 37 in the last page
    assert bool((last != 0).any())  # numbers, not zeros: a kernel reading past the end is caught
    plain = make_inputs(case.with_(page_size=None), 1)
    assert torch.equal(plain.k, inputs.k) and torch.equal(plain.q, inputs.q)  # pages change nothing else


def test_undeclared_cache_lengths_are_folded_and_pages_given_contiguous() -> None:
    case = AttentionCase(batch=3, heads=4, kv_heads=2, tq=4, tk=21, d=8, causal=True, causal_align="bottom_right",
                         cache_seqlens=(21, 2, 9), page_size=4)
    inputs = make_inputs(case, 2)
    dense = inputs.kwargs(case)
    assert dense["causal"] is False and torch.equal(dense["mask"], _brute(case))
    assert inputs.arrays(()) == (inputs.q, inputs.k, inputs.v)
    native = inputs.kwargs(case, ("bottom_right", "cache_seqlens", "paged"))
    assert native["mask"] is None and native["cache_seqlens"].tolist() == [21, 2, 9]
    assert native["block_table"] is inputs.block_table
    assert inputs.arrays(("paged",))[1] is inputs.k_pages
    full = case.with_(cache_seqlens=None)  # a paged call always says its lengths
    assert make_inputs(full, 2).kwargs(full, ("cache_seqlens", "paged", "bottom_right"))["cache_seqlens"].tolist() == [21] * 3
    want = reference_attention(inputs.q64, inputs.k64, inputs.v64, **inputs.oracle_kwargs(case))
    got = reference_attention(inputs.q64, inputs.k64, inputs.v64, mask=dense["mask"])
    assert torch.equal(want, got) and torch.equal(want[1, :, :2], torch.zeros_like(want[1, :, :2]))
    masked = make_implementation("masked", lambda q, k, v, *, causal=False, mask=None, scale=None: q,
                                 backend="torch", mask=True, causal=True, gqa=True)
    bare = make_implementation("bare", lambda q, k, v, *, causal=False, mask=None, scale=None: q, backend="torch",
                               gqa=True)
    assert masked.not_supported_reasons(case) == []
    assert any("cache_seqlens" in r for r in bare.not_supported_reasons(case.with_(causal=False, causal_align="top_left")))
    assert bare.not_supported_reasons(case.with_(cache_seqlens=None, causal=False, causal_align="top_left")) == []


def test_paged_needs_cache_lengths_declared() -> None:
    def fn(q, k, v, *, causal=False, mask=None, scale=None, block_table=None, cache_seqlens=None):  # type: ignore[no-untyped-def]
        return q

    with pytest.raises(PluginError, match="needs 'cache_seqlens' too"):
        make_implementation("pages", fn, backend="torch", structures=("paged",))
    assert make_implementation("pages", fn, backend="torch", structures=("paged", "cache_seqlens")).declared.structures


def test_flops_and_compulsory_bytes_count_what_a_step_must_do() -> None:
    case = AttentionCase(**decode_fields(8, 32, 8, 32768))
    assert attention_flops(case) == 4 * 8 * 32 * 32768 * 128
    q = 8 * 32 * 128
    assert compulsory_bytes(case) == 4 * (2 * q + 2 * 8 * 8 * 32768 * 128)
    assert attention_flops(case) / compulsory_bytes(case) == pytest.approx(2.0, rel=0.01)  # 2 (H/Hkv) / 4 bytes
    ragged = case.with_(batch=2, cache_seqlens=(100, 7))
    assert attention_flops(ragged) == 4 * 32 * 107 * 128 and compulsory_keys(ragged) == 107
    window = AttentionCase(tq=1000, d=64, causal=True, window=(100, 0))
    assert compulsory_keys(window) == 1000  # every key is some query's
    tail = AttentionCase(tq=4, tk=1000, d=64, window=(10, 0), causal=True, causal_align="bottom_right")
    assert compulsory_keys(tail) == 14  # the last 4 positions and 10 to their left


KERNEL_CASES = [
    dict(batch=3, heads=8, kv_heads=2, tq=4, tk=203, d=16, causal=True, causal_align="bottom_right",
         cache_seqlens=(203, 2, 0), page_size=8),
    dict(batch=2, heads=8, kv_heads=2, tq=1, tk=2000, d=128, cache_seqlens=(1999, 513)),
    dict(batch=1, heads=16, kv_heads=1, tq=1, tk=3000, d=128),
    dict(batch=2, heads=4, kv_heads=4, tq=16, tk=999, d=59, causal=True, causal_align="bottom_right", page_size=16),
    dict(batch=2, heads=4, kv_heads=2, tq=2, tk=700, d=80, window=(50, 0), causal=True, causal_align="bottom_right",
         cache_seqlens=(700, 60), page_size=16),
    dict(batch=1, heads=2, tq=113, tk=203, d=40, causal=True, layout="transposed"),
]


@pytest.mark.parametrize("fields", KERNEL_CASES, ids=lambda f: AttentionCase(**f).id)
@pytest.mark.parametrize("name", ["tiled_decode", "decode_numpy"])
def test_decode_kernels_match_the_oracle(name: str, fields: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    impl = REGISTRY.get(name)
    case = AttentionCase(**fields)
    reasons = impl.not_supported_reasons(case)  # its available(case): the build, or a tier cap below every build
    if reasons:
        pytest.skip("; ".join(reasons))
    inputs = make_inputs(case, 7, impl.declared.backend)
    want = reference_attention(inputs.q64, inputs.k64, inputs.v64, **inputs.oracle_kwargs(case))
    # every compiled path: the 512-bit loops (AVX-512 only where the CPU has it; float32 caches only when
    # FLOAT32_512 says so) and the 256-bit ones
    paths = [("avx512", True), ("avx512", False), ("avx2", False)] if name == "tiled_decode" else [("", False)]
    for isa, float32_512 in paths:
        monkeypatch.setenv("ATTNBENCH_DECODE_ISA", isa)
        monkeypatch.setattr("implementations.tiled_decode.FLOAT32_512", float32_512)
        got = to_float64(impl(*inputs.arrays(impl.declared.structures), **inputs.kwargs(case, impl.declared.structures)))
        assert float((got - want).abs().max()) < 2e-5, (isa, float32_512, float((got - want).abs().max()))


def test_split_kv_splits_a_long_cache_and_merges_exactly() -> None:
    from implementations import decode_numpy as ref
    from implementations.tiled_decode import extension, piece_size

    if isinstance(extension(), str):
        pytest.skip(str(extension()))
    lengths = torch.tensor([32768])
    items = extension().plan(lengths, 1, 1, False, False, -1, 0, piece_size(lengths, 1, 2))
    assert items.shape[0] == 8 and int((items[:, 3] - items[:, 2]).sum()) == 32768  # B x Hkv = 1 < 2 threads
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(*s, generator=gen, dtype=torch.float64).numpy() for s in ((3, 8), (200, 8), (200, 8)))
    allowed = torch.ones(3, 200, dtype=torch.bool).numpy()
    whole, _ = ref.piece(q, k, v, allowed)
    parts = [ref.piece(q, k[a:b], v[a:b], allowed[:, a:b]) for a, b in ((0, 64), (64, 130), (130, 200))]
    merged = ref.merge([o for o, _ in parts], [lse for _, lse in parts])
    assert abs(merged - whole).max() < 1e-12


def test_the_built_kernel_keeps_its_prefetch_instructions() -> None:
    """The decode kernel reads at the memory's rate only because it prefetches each K and V row ahead.
    GCC 12 at -O3 once deleted every loop of _mm_prefetch calls, silently (the kernel then read a third
    as fast); the prefetches are inline assembly now, and the built module must contain them."""
    import shutil
    import subprocess

    from implementations.tiled_decode import extension, tiers

    if not tiers():
        pytest.skip(str(extension()))
    objdump = shutil.which("objdump")
    if objdump is None:
        pytest.skip("objdump (binutils) is not installed")
    for tier in tiers():  # each tier is a build of its own
        listing = subprocess.run([objdump, "-d", "--no-show-raw-insn", extension(tier).__file__],  # type: ignore[union-attr]
                                 capture_output=True, text=True, check=True, timeout=120).stdout
        assert "prefetcht1" in listing, tier  # the K and V rows (hint T1 by default)
        assert "prefetcht2" in listing, tier  # a paged cache's pages, warmed ahead


def test_decode_suites() -> None:
    ids = [case.id for case, _ in sweep_cases("decode")]
    assert "B8-H32/8-T1x32768-d128-float32" in ids and "B1-H32/1-T1x32768-d128-float32" in ids
    assert any(i.startswith("B1-H32/8-T1x65536") for i in ids) and any(i.startswith("B64-") for i in ids)
    assert any("paged=16" in i and "cache=" in i for i in ids) and any("T16x8192" in i for i in ids)
    quick = [c for c in plan("quick", ["torch_sdpa", "numpy_naive", "tiled_decode"]) if c.case.tq < c.case.tk]
    assert len({c.case.id for c in quick}) == 2 and {c.implementation for c in quick} <= set(DECODE_MAIN)


def _run(bandwidth: dict | None) -> Run:
    case = AttentionCase(**decode_fields(1, 8, 2, 4096, d=64))
    prefill = AttentionCase(heads=8, tq=1024, d=64)
    cells = tuple(BenchCell(implementation=name, case=c.to_dict(), case_id=c.id, mode="fwd", status=Status.OK,
                            flops=attention_flops(c), peak_key="float32/cpu", samples_s=(t, t, t),
                            stats={"median": t, "iqr_over_median": 0.0, "n": 3}, gflops=attention_flops(c) / t / 1e9,
                            threads=2, bytes=float(compulsory_bytes(c)))
                  for name, c, t in (("a", case, 1e-4), ("b", case, 2e-4), ("a", prefill, 2e-3), ("b", prefill, 3e-3)))
    return Run(run_id="r", command="bench", complete=True, environment={}, config={}, cells=cells,
               peaks={"float32/cpu": {"gflops": 150.0}}, bandwidth=bandwidth)


def test_bandwidth_is_appended_and_reported(tmp_path: Path) -> None:
    from harness.report.builder import build_report
    from harness.report.settings import ReportSettings
    from harness.results import read_run
    from harness.results.files import write_json_atomic

    run = _run({"cpu/threads=2": {"read_gbps": 40.0, "copy_gbps": 30.0}})
    cell = run.bench_cells()[0]
    assert cell.gbps == pytest.approx(compulsory_bytes(AttentionCase(**dict(cell.case))) / 1e-4 / 1e9)
    assert run.pct_bandwidth(cell) == pytest.approx(100 * cell.gbps / 40.0)
    stored = run.to_json()
    assert stored["bandwidth"]["cpu/threads=2"]["read_gbps"] == 40.0
    assert "bandwidth" not in _run(None).to_json()  # older runs keep their shape
    path = tmp_path / "run.json"
    write_json_atomic(path, {"schema": "attnbench.results", **stored})
    assert read_run(path).bandwidth == run.bandwidth
    report = build_report(ReportSettings((path,), tmp_path / "report"))
    assert (tmp_path / "report" / "plots" / "roofline.png").exists()
    summary = (tmp_path / "report" / "summary.md").read_text()
    assert "Decode steps against the memory roof" in summary and "read bandwidth cpu/threads=2 40 GB/s" in summary
    assert "Fastest decode step (B1-H8/2-T1x4096-d64-float32):** a, 2.00x faster than b" in summary
    assert {"gbps", "pct_bandwidth"} <= set(report.bench_table.columns)


def test_bandwidth_measure() -> None:
    from harness.bench.bandwidth import measure_bandwidth
    from harness.bench.timing import TimingConfig

    measured = measure_bandwidth("cpu", TimingConfig(budget_s=0.1, min_samples=2), threads=1)
    assert measured["read_gbps"] > 0.1 and measured["copy_gbps"] > 0.1 and measured["threads"] == 1
    assert "256 MiB" in measured["method"]


def test_a_cluster_runs_roofline_takes_its_own_kinds_roofs() -> None:
    import pandas as pd

    from harness.report.roofline import roofs

    cells = pd.DataFrame({"node_kind": ["EPYC x2", "EPYC x2", "Xeon x64"], "device": ["cpu"] * 3, "flops": [1.0] * 3})
    from harness.results import Bandwidth, BandwidthKey, Peak, PeakKey

    peaks = {PeakKey("float32", "cpu", "EPYC x2"): Peak(gflops=190.0), PeakKey("float32", "cpu", "Xeon x64"): Peak(gflops=3000.0),
             PeakKey("float32", "cpu"): Peak(gflops=1.0)}
    bandwidth = {BandwidthKey("cpu", 1, "EPYC x2"): Bandwidth(read_gbps=30.0),
                 BandwidthKey("cpu", 1, "Xeon x64"): Bandwidth(read_gbps=200.0), BandwidthKey("cpu", 1): Bandwidth(read_gbps=5.0)}
    kept, kind, peak, read = roofs(cells, "float32", peaks, bandwidth)
    assert (kind, peak, read, len(kept)) == ("EPYC x2", 190.0, 30.0, 2)
    local = pd.DataFrame({"device": ["cpu"], "flops": [1.0]})
    assert roofs(local, "float32", peaks, bandwidth)[1:] == (None, 1.0, 5.0)
