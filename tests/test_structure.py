"""Structured attention: sliding windows and bottom-right causal as case data, declared by plugins,
folded into a dense mask for the others, in the oracle, in FLOPs, and taken natively by the tiled kernels."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from harness import register
from harness.case.attention import AttentionCase
from harness.case.structures import DENSE_MASK_BUDGET_BYTES
from harness.contract.discovery import load_registry
from harness.contract.registry import make_implementation
from harness.errors import PluginError, UsageError
from harness.reference.flops import attended_pairs, attention_flops, work_g
from harness.reference.oracle import reference_attention, structure_allowed
from harness.reference.tensors import make_inputs, to_float64
from harness.verify.suites import kernel_cases
from implementations._flash_cpu import _Plan

REGISTRY = load_registry()
NATIVE = ["tiled", "tiled_numpy", "tiled_fused"]
"""The kernels that take every structure natively."""


def _runnable() -> list[str]:
    """NATIVE without tiled_fused where its C++ extension does not build (asked at test time: it may compile)."""
    return [name for name in NATIVE if not REGISTRY.get(name).not_supported_reasons(AttentionCase())]
SHAPES = [(7, 7), (5, 11), (11, 5), (1, 9), (9, 1)]
STRUCTURES = [(c, w, a) for c in (False, True) for w in (None, (0, 0), (1, 0), (3, 2), (20, 20))
              for a in ("top_left", "bottom_right") if c or w is not None or a == "top_left"]


def _brute(tq: int, tk: int, causal: bool, window: tuple[int, int] | None, align: str) -> torch.Tensor:
    """The definition, one pair at a time (FlashAttention's convention)."""
    shift = tk - tq if align == "bottom_right" else 0
    out = torch.zeros(tq, tk, dtype=torch.bool)
    for i, j in itertools.product(range(tq), range(tk)):
        jj = j - shift
        ok = (not causal or jj <= i) and (window is None or i - window[0] <= jj <= i + window[1])
        out[i, j] = ok
    return out


@pytest.mark.parametrize("tq,tk", SHAPES)
@pytest.mark.parametrize("causal,window,align", STRUCTURES)
def test_structure_and_flops_follow_the_definition(tq: int, tk: int, causal: bool,
                                                    window: tuple[int, int] | None, align: str) -> None:
    want = _brute(tq, tk, causal, window, align)
    got = structure_allowed(tq, tk, causal=causal, window=window, causal_align=align)
    assert torch.equal(torch.ones(tq, tk, dtype=torch.bool) if got is None else got, want)
    assert attended_pairs(tq, tk, causal, window, align) == int(want.sum())


def test_ids_of_existing_cases_do_not_change_and_structure_is_named() -> None:
    assert AttentionCase(batch=3, heads=8, kv_heads=2, tq=113, tk=203, d=59, causal=True).id == \
        "B3-H8/2-T113x203-d59-float32-causal"
    assert AttentionCase(tq=97, d=32, causal=True, window=(256, 0)).id == "B1-H1-T97-d32-float32-causal-window=256,0"
    case = AttentionCase(tq=5, tk=9, causal=True, causal_align="bottom_right")
    assert case.id == "B1-H1-T5x9-d16-float32-causal-bottom_right" and case.structures == {"bottom_right"}
    again = AttentionCase.from_dict({**case.with_(window=(3, 2)).to_dict(), "window": [3, 2]})  # as JSON reads it
    assert again.window == (3, 2) and again.id == case.with_(window=(3, 2)).id


@pytest.mark.parametrize("fields,phrase", [
    ({"window": (-1, 0)}, "two integers >= 0"), ({"window": (1,)}, "two integers >= 0"),
    ({"causal_align": "centre"}, "causal_align 'centre'"), ({"causal_align": "bottom_right"}, "set causal=True"),
])
def test_bad_structure_is_a_usage_error(fields: dict, phrase: str) -> None:
    with pytest.raises(UsageError, match=phrase):
        AttentionCase(**fields)


def _plain(q, k, v, *, causal=False, mask=None, scale=None):  # type: ignore[no-untyped-def]
    return q


def test_a_declared_structure_needs_its_parameter() -> None:
    with pytest.raises(PluginError) as info:
        make_implementation("windowed", _plain, backend="torch", mask=True, structures=("window", "bottom_right"))
    text = str(info.value)
    assert "'windowed'" in text and "`window` (structures=('window',) is declared)" in text
    assert "`causal_align`" in text and "window=None" in text and "causal_align='top_left'" in text
    with pytest.raises(PluginError, match="unknown value.*'sliding'.*window: sliding windows"):
        make_implementation("windowed", _plain, backend="torch", structures=("sliding",))

    @register("takes_window", backend="torch", structures="window")
    def takes_window(q, k, v, *, causal=False, mask=None, scale=None, window=None):  # type: ignore[no-untyped-def]
        return q

    impl = takes_window.__attnbench__  # type: ignore[attr-defined]
    assert impl.declared.structures == ("window",) and impl.capabilities()["structures"] == ["window"]


def test_undeclared_structures_need_a_mask_and_a_budget() -> None:
    windowed = AttentionCase(tq=64, d=16, window=(8, 0))
    bare = make_implementation("bare", _plain, backend="torch")
    assert any("structures=('window',) or mask=True" in r for r in bare.not_supported_reasons(windowed))
    masked = make_implementation("masked", _plain, backend="torch", mask=True)
    assert masked.not_supported_reasons(windowed) == []
    huge = windowed.with_(tq=40_000, tk=40_000)  # 40k x 40k booleans: 1.5 GiB
    assert huge.dense_mask_bytes() > DENSE_MASK_BUDGET_BYTES
    assert any("MiB, over the budget" in r for r in masked.not_supported_reasons(huge))
    assert REGISTRY.get("tiled").not_supported_reasons(huge) == []  # native: no dense mask, no budget
    ids = [c.id for c in kernel_cases(bare, "small")]
    assert not any("window=" in i or "bottom_right" in i for i in ids)
    ids = [c.id for c in kernel_cases(masked, "small")]
    assert any("window=" in i for i in ids) and any("bottom_right" in i for i in ids)


def test_the_harness_folds_what_is_not_declared_into_the_mask() -> None:
    case = AttentionCase(batch=2, heads=2, tq=9, tk=13, d=8, causal=True, window=(3, 1), causal_align="bottom_right",
                         mask="key_padding")
    inputs = make_inputs(case, 3)
    dense = inputs.kwargs(case)
    want = _brute(9, 13, True, (3, 1), "bottom_right") & inputs.mask
    assert dense["causal"] is False and "window" not in dense and torch.equal(dense["mask"], want)
    native = inputs.kwargs(case, ("window", "bottom_right"))
    assert native["causal"] is True and native["window"] == (3, 1) and native["causal_align"] == "bottom_right"
    assert native["mask"] is inputs.mask
    only_window = inputs.kwargs(case, ("window",))  # the window's alignment is folded with it
    assert only_window["window"] is None and torch.equal(only_window["mask"], want)
    numpy_inputs = make_inputs(case, 3, "numpy")
    assert isinstance(numpy_inputs.kwargs(case)["mask"], np.ndarray)


def test_rows_with_no_allowed_key_are_zero() -> None:
    """Bottom-right with Tq > Tk: the first Tq - Tk rows see no key (as fully masked rows: output 0)."""
    case = AttentionCase(heads=2, tq=11, tk=5, d=8, causal=True, causal_align="bottom_right")
    inputs = make_inputs(case, 1)
    out = reference_attention(inputs.q64, inputs.k64, inputs.v64, **inputs.oracle_kwargs(case))
    assert torch.equal(out[..., :6, :], torch.zeros(1, 2, 6, 8, dtype=torch.float64))
    assert bool((out[..., 6:, :] != 0).all())
    for name in _runnable():
        impl = REGISTRY.get(name)
        inputs = make_inputs(case, 1, impl.declared.backend)
        got = to_float64(impl(inputs.q, inputs.k, inputs.v, **inputs.kwargs(case, impl.declared.structures)))
        assert torch.equal(got[..., :6, :], torch.zeros(1, 2, 6, 8, dtype=torch.float64)), name


@pytest.mark.parametrize("name", NATIVE)
@pytest.mark.parametrize("fields", [
    {"tq": 70, "window": (0, 0)}, {"tq": 70, "window": (17, 5)}, {"tq": 70, "causal": True, "window": (9, 0)},
    {"tq": 37, "tk": 90, "causal": True, "causal_align": "bottom_right"},
    {"tq": 90, "tk": 37, "causal": True, "causal_align": "bottom_right", "window": (4, 0)},
    {"tq": 37, "tk": 90, "window": (6, 3), "causal_align": "bottom_right", "mask": "key_padding", "batch": 2},
])
def test_tiled_kernels_take_structure_natively(name: str, fields: dict) -> None:
    impl = REGISTRY.get(name)
    reasons = impl.not_supported_reasons(AttentionCase())
    if reasons:
        pytest.skip("; ".join(reasons))
    assert {"window", "bottom_right"} <= set(impl.declared.structures)
    case = AttentionCase(heads=4, kv_heads=2, d=16, dtype="float64", **fields)
    inputs = make_inputs(case, 4, impl.declared.backend)
    want = reference_attention(inputs.q64, inputs.k64, inputs.v64, **inputs.oracle_kwargs(case))
    for block_q, block_k in ((16, 16), (32, 64), (128, 128)):
        got = impl(inputs.q, inputs.k, inputs.v, **inputs.kwargs(case, impl.declared.structures), block_q=block_q,
                   block_k=block_k)
        assert float((to_float64(got) - want).abs().max()) < 1e-12, (block_q, block_k)


def test_tiled_gradients_with_a_window() -> None:
    case = AttentionCase(heads=2, tq=50, tk=80, d=16, dtype="float64", causal=True, window=(7, 0),
                         causal_align="bottom_right")
    inputs = make_inputs(case, 6)
    leaves = [x.detach().requires_grad_() for x in (inputs.q, inputs.k, inputs.v)]
    dout = torch.randn(1, 2, 50, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    REGISTRY.get("tiled")(*leaves, **inputs.kwargs(case, ("window", "bottom_right")), block_q=16, block_k=16).backward(dout)
    ref = [x.detach().requires_grad_() for x in (inputs.q64, inputs.k64, inputs.v64)]
    reference_attention(*ref, **inputs.oracle_kwargs(case)).backward(dout)
    for got, want in zip(leaves, ref):
        assert got.grad is not None and want.grad is not None
        assert float((got.grad - want.grad).abs().max()) < 1e-10


def test_tiled_visits_only_the_blocks_of_the_window() -> None:
    """Causal window 256 at T = 16384: each query block visits O(window) keys, so the work is O(T)."""
    t, bq, bk = 16384, 256, 512
    q = torch.empty(1, 1, t, 8)
    plan = _Plan(q, q, q, True, None, None, bq, bk, window=(256, 0))
    visited = sum(k1 - k0 for q0, q1 in plan.q_blocks for k0, k1 in plan.k_blocks(q0, q1))
    assert visited == sum(min(q1, t) - max(0, q0 - 256) for q0, q1 in plan.q_blocks)  # the band, nothing more
    assert visited <= t * (256 + bq)
    full = _Plan(q, q, q, True, None, None, bq, bk)
    assert sum(k1 - k0 for q0, q1 in full.q_blocks for k0, k1 in full.k_blocks(q0, q1)) > 10 * visited  # T / 2(256 + 256)


def test_flops_count_only_allowed_pairs() -> None:
    base = AttentionCase(heads=8, tq=4096, d=64, causal=True)
    windowed = base.with_(window=(256, 0))
    assert attention_flops(windowed) == 4 * 8 * 64 * (257 * 4096 - 256 * 257 // 2)
    assert attention_flops(windowed.with_(tq=8192, tk=8192)) / attention_flops(windowed) == pytest.approx(2.0, rel=0.02)
    assert work_g(windowed.with_(tq=8192, tk=8192)) / work_g(windowed) == pytest.approx(2.0, rel=0.02)
    assert work_g(base) == 8 * 4096 * 4096 * 64  # unchanged without a window
    assert attended_pairs(3, 5, True, None, "bottom_right") == 3 + 4 + 5


def _bench_rows(cases: list, timings: dict) -> list[dict]:
    """Bench rows as the report loads them, for made-up implementations whose time is ``timings[name](case)``."""
    from harness.report.load import BENCH_COLUMNS

    rows = []
    for case, mode in cases:
        for name, seconds in timings.items():
            row = {c: None for c in BENCH_COLUMNS}
            row.update({k: v for k, v in case.to_dict().items() if k in BENCH_COLUMNS})
            row.update(implementation=name, case_id=case.id, mode=mode, status="ok", median=seconds(case),
                       window=None if case.window is None else f"{case.window[0]},{case.window[1]}",
                       window_width=None if case.window is None else sum(case.window),
                       causal_align="top_left", varlen=None if case.varlen is None else f"{len(case.varlen)} sequences")
            rows.append(row)
    return rows


def test_window_bench_suite_its_complexity_fit_and_plots(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import pandas as pd

    from harness.analysis.sweepfits import complexity_table
    from harness.bench.sweeps import WINDOW_WIDTHS, sweep_cases
    from harness.report.load import BENCH_COLUMNS
    from harness.report.structure_plots import window_vs_T_plot, window_width_plot

    cases = sweep_cases("window")
    windowed = [(c, m) for c, m in cases if c.window == (256, 0)]
    assert [c.tq for c, _ in windowed] == [2048, 4096, 8192, 16384]
    assert all(c.causal and c.heads == 8 and c.d == 64 and m == "fwd" for c, m in cases)
    assert [c.tq for c, _ in cases if c.window is None] == [2048, 4096, 8192, 16384]  # dense causal beside it
    assert sorted(c.window[0] for c, _ in cases if c.tq == 8192 and c.window) == sorted({*WINDOW_WIDTHS, 256})
    # a kernel linear in the window's pairs, and one quadratic in T (a dense mask), as bench would record
    rows = _bench_rows(cases, {"banded": lambda c: work_g(c) * 1e-12, "dense": lambda c: c.tq ** 2 * 1e-9})
    frame = pd.DataFrame(rows, columns=list(BENCH_COLUMNS))
    table = {r.implementation: r for r in complexity_table(frame) if r.quantity == "time" and r.axis == "T"
             and "window" in r.sweep}
    assert table["banded"].theory == 1.0 and table["banded"].slope == pytest.approx(1.0, abs=0.05)
    assert not table["banded"].flagged and "window=256,0" in table["banded"].sweep
    assert table["dense"].slope == pytest.approx(2.0, abs=0.01) and table["dense"].flagged
    widths = {r.implementation: r for r in complexity_table(frame) if r.quantity == "time" and r.axis == "window"}
    assert widths["banded"].theory == 1.0 and widths["banded"].slope == pytest.approx(1.0, abs=0.1)
    assert widths["dense"].slope == pytest.approx(0.0, abs=0.01) and "T=8192" in widths["dense"].sweep
    by_t = window_vs_T_plot(frame, tmp_path)
    by_width = window_width_plot(frame, tmp_path)
    assert by_t is not None and by_t.path.stat().st_size > 10_000 and "dense causal" in by_t.caption
    assert by_width is not None and by_width.path.name == "time_vs_window.png" and "T=8192" in by_width.caption


def test_varlen_bench_suite_is_16_ragged_sequences_fitted_apart() -> None:
    import pandas as pd

    from harness.analysis.sweepfits import cell_fits, complexity_table
    from harness.bench.sweeps import ragged, sweep_cases
    from harness.report.load import BENCH_COLUMNS
    from harness.results import BenchCell, Status

    cases = sweep_cases("varlen")
    assert [c.tq for c, _ in cases] == [2048, 4096, 8192, 16384]
    for case, _ in cases:
        assert case.varlen == ragged(case.tq) and len(case.varlen) == 16 and not case.causal
        lengths = [a for a, _ in case.varlen]
        assert sum(lengths) == case.tq and max(lengths) > 4 * min(lengths)  # ragged
    plain = [(AttentionCase(heads=8, tq=t, d=64), "fwd") for t in (2048, 4096, 8192, 16384)]
    rows = _bench_rows(cases + plain, {"packed": lambda c: work_g(c) * 1e-12})
    table = [r for r in complexity_table(pd.DataFrame(rows, columns=list(BENCH_COLUMNS)))
             if r.quantity == "time" and r.axis == "T"]
    assert {("varlen=16 sequences" in r.sweep) for r in table} == {True, False}  # never merged with plain cells
    cells = [BenchCell(implementation="packed", case=c.to_dict(), case_id=c.id, mode="fwd", status=Status.OK,
                       samples_s=(work_g(c) * 1e-12,) * 3, stats={"median": work_g(c) * 1e-12}) for c, _ in cases]
    fits = [r for f in cell_fits(cells) for r in f.rows if r.axis == "T" and r.quantity == "time"]
    assert len(fits) == 1 and fits[0].slope == pytest.approx(2.0, abs=0.05)  # proportional lengths: T^2 work


PACKS = [((3, 3), (5, 5)), ((3, 9), (0, 4), (12, 4), (2, 0), (7, 7))]


@pytest.mark.parametrize("seqlens", PACKS)
@pytest.mark.parametrize("causal,window,align", [(False, None, "top_left"), (True, None, "top_left"),
                                                 (True, None, "bottom_right"), (False, (2, 1), "bottom_right")])
def test_packed_sequences_are_block_diagonal(seqlens: tuple, causal: bool, window: tuple | None, align: str) -> None:
    tq, tk = sum(a for a, _ in seqlens), sum(b for _, b in seqlens)
    case = AttentionCase(heads=2, tq=tq, tk=tk, d=8, varlen=seqlens, causal=causal, window=window, causal_align=align)
    want = torch.zeros(tq, tk, dtype=torch.bool)
    q0 = k0 = 0
    for lq, lk in seqlens:  # the definition: each sequence alone
        want[q0:q0 + lq, k0:k0 + lk] = _brute(lq, lk, causal, window, align)
        q0, k0 = q0 + lq, k0 + lk
    inputs = make_inputs(case, 2)
    assert torch.equal(inputs.kwargs(case)["mask"], want)  # folded whole for a plugin that does not declare it
    assert attention_flops(case) == 4 * 2 * 8 * int(want.sum())
    for only in (("varlen",), ("varlen", "window"), ("varlen", "bottom_right")):  # the rest folded per sequence
        kw = inputs.kwargs(case, only)
        assert kw["cu_seqlens_q"].tolist() == [0, *itertools.accumulate(a for a, _ in seqlens)]
        got = reference_attention(inputs.q64, inputs.k64, inputs.v64, mask=kw["mask"], causal=kw["causal"],
                                  window=kw.get("window"), causal_align=kw.get("causal_align", "top_left"),
                                  varlen=seqlens)
        assert torch.equal(got, reference_attention(inputs.q64, inputs.k64, inputs.v64, **inputs.oracle_kwargs(case)))
    for name in _runnable():
        impl = REGISTRY.get(name)
        c64 = case.with_(dtype="float64")
        inp = make_inputs(c64, 2, impl.declared.backend)
        got = to_float64(impl(inp.q, inp.k, inp.v, **inp.kwargs(c64, impl.declared.structures), block_q=16, block_k=16))
        oracle = reference_attention(inp.q64, inp.k64, inp.v64, **inp.oracle_kwargs(c64))
        assert float((got - oracle).abs().max()) < 1e-12, name


def test_packed_case_ids_and_validation() -> None:
    case = AttentionCase(heads=2, tq=16, tk=13, d=8, varlen=((3, 9), (0, 4), (13, 0)), causal=True)
    assert case.id == "B1-H2-T16x13-d8-float32-causal-varlen=3x9,0x4,13x0" and case.structures == {"varlen"}
    assert AttentionCase.from_dict({**case.to_dict(), "varlen": [[3, 9], [0, 4], [13, 0]]}) == case
    with pytest.raises(UsageError, match="sums of the varlen"):
        case.with_(tq=17)
    with pytest.raises(UsageError, match="batch 1"):
        case.with_(batch=2)
