"""The covering array: every pair of declared axis values meets, and capabilities decide the axes."""

from __future__ import annotations

import itertools

from harness.case.attention import AttentionCase
from harness.contract.registry import make_implementation
from harness.reference.tensors import make_inputs
from harness.verify.pairwise import GQA, axes_for, case_values, coverage, pairwise_cases
from harness.verify.suites import kernel_cases


def _impl(**capabilities: object):
    return make_implementation("probe", lambda q, k, v, **kw: q, backend="torch", **capabilities)


FULL = dict(dtypes=("float32", "bfloat16"), causal=True, mask=True, gqa=True, grad=True)


def test_every_pair_of_declared_values_is_exercised_in_quick_and_full() -> None:
    impl = _impl(**FULL)
    for suite in ("quick", "full"):
        cases = pairwise_cases(impl, suite, "cpu")
        result = coverage(impl, suite, cases)
        assert result["covered"] == result["total"] and result["fraction"] == 1.0, suite
        assert result["total"] > 1000  # 13 axes: many pairs, each met at least once
        values = [case_values(c) for c in cases]
        for a, b in (("scale", "mask"), ("grad", "d"), ("grad", "mask"), ("gqa", "causal"), ("inputs", "dtype")):
            met = {(v[a], v[b]) for v in values}
            axes = axes_for(impl, suite)
            assert met >= set(itertools.product(axes[a], axes[b])) - {("none", r) for r in ("2d", "3d")}, (a, b)


def test_capabilities_decide_the_axes() -> None:
    plain = _impl()
    cases = pairwise_cases(plain, "quick", "cpu")
    assert {c.mask for c in cases} == {"none"} and not any(c.causal or c.grad for c in cases)
    assert all(c.heads == c.kv_heads for c in cases) and {c.dtype for c in cases} == {"float32"}
    rich = pairwise_cases(_impl(**FULL), "quick", "cpu")
    assert {c.heads // c.kv_heads for c in rich} >= {1, 2, 3, 4, 7} and any(c.kv_heads == 1 for c in rich)
    assert {c.mask_rank for c in rich} == {"full", "2d", "3d", "bcast_heads"}
    assert {c.layout for c in rich} == {"contiguous", "transposed", "strided", "offset"}
    assert any(c.causal and c.tq > c.tk for c in rich) and any(c.causal and c.tq < c.tk for c in rich)
    assert any(c.inputs == "large" and c.scale == 1.0 and c.dtype == "bfloat16" for c in
               kernel_cases(_impl(**FULL), "quick"))


def test_masks_of_every_rank_broadcast_and_paddings_have_their_shape() -> None:
    for rank, shape in (("full", (2, 1, 1, 9)), ("2d", (5, 9)), ("3d", (3, 5, 9)), ("bcast_heads", (2, 1, 5, 9))):
        case = AttentionCase(batch=2, heads=3, tq=5, tk=9, mask="key_padding_left", mask_rank=rank)
        mask = make_inputs(case, 1, "torch").mask
        assert tuple(mask.shape) == shape
        full = mask.expand(2, 3, 5, 9)
        assert bool((full[..., -1]).all()), "left padding keeps the last keys"
    one = make_inputs(AttentionCase(batch=2, heads=2, tq=4, tk=6, mask="one_masked"), 1, "torch").mask
    assert bool(((~one).sum(-1) == 1).all())
    lengths = make_inputs(AttentionCase(batch=3, tq=4, tk=6, mask="key_padding_holes"), 1, "torch").mask.sum(-1)
    assert int(lengths.min()) == 1 and int(lengths.max()) == 6  # padding of Tk - 1 and none
    view = make_inputs(AttentionCase(layout="offset"), 1, "torch").q
    assert view.storage_offset() > 0 and view.is_contiguous()
    assert GQA[7] == (14, 2)


def test_the_report_says_how_much_of_the_pairwise_space_was_exercised(tmp_path) -> None:
    from harness.cli import main

    result = tmp_path / "verify.json"
    assert main(["verify", "--only", "numpy_naive", "--trials", "1", "--json", str(result)]) == 0
    assert main(["report", str(result), "--out", str(tmp_path / "report")]) == 0
    summary = (tmp_path / "report" / "summary.md").read_text()
    assert "## Pairwise coverage" in summary and "| numpy_naive | 3520 | 3520 | 100.0 | quick |" in summary
    assert "Pairwise coverage" in (tmp_path / "report" / "index.html").read_text()


def test_structures_are_an_axis_crossed_with_every_other() -> None:
    from harness.verify.structured import structure_label

    impl = _impl(**FULL, bias=True)
    for suite in ("quick", "full"):
        cases = pairwise_cases(impl, suite, "cpu")
        values = [case_values(c) for c in cases]
        kinds = {v["structure"] for v in values}
        assert kinds == {"none", "window", "window_left", "window_br", "causal_br", "varlen", "varlen_br", "cache",
                         "cache_window", "cache_tl"}, kinds  # no pages: not declared natively, and not a mask
        for other in ("scale", "layout", "aux_layout", "dtype", "mask", "inputs", "gqa", "bias"):
            met = {(v["structure"], v[other]) for v in values}
            assert met >= {(k, x) for k in kinds for x in axes_for(impl, suite)[other]}, other
        assert {(v["structure"], v["grad"]) for v in values} >= {(k, True) for k in kinds}
        for case in cases:  # every structure valid and labelled as it was asked for
            assert structure_label(case) == case_values(case)["structure"]
        varlen = [c for c in cases if c.varlen]
        assert any(0 in pair for c in varlen for pair in c.varlen) and all(c.batch == 1 for c in varlen)
        cache = [c for c in cases if c.cache_seqlens]
        assert any(min(c.cache_seqlens) < c.tk for c in cache) and any(c.tk in c.cache_seqlens for c in cache)
        assert any(0 in c.cache_seqlens for c in cache)
    paged = _impl(dtypes=("float32",), causal=True, gqa=True, structures=("cache_seqlens", "paged", "bottom_right"))
    pages = [c for c in pairwise_cases(paged, "quick", "cpu") if c.page_size]
    assert any(c.tk % c.page_size for c in pages) and any(c.tk % c.page_size == 0 for c in pages)
    assert any(c.cache_seqlens and max(c.cache_seqlens) <= c.tk - c.page_size for c in pages)  # table longer than needed
    assert {c.layout for c in pages} == {"contiguous", "transposed", "strided", "offset"}


def test_sinks_softcap_and_dv_are_axes_crossed_with_every_other() -> None:
    """The 2025 features are axes of the array where declared: each meets every value of every other axis (sinks
    with a soft-cap, with gradients, with each mask and dtype; a soft-cap never with a bias, which kernels order
    differently), and the array still covers every pair."""
    impl = _impl(**FULL, sinks=True, softcap=True, value_dim=True, bias=True)
    cases = pairwise_cases(impl, "quick", "cpu")
    result = coverage(impl, "quick", cases)
    assert result["covered"] == result["total"]
    values = [case_values(c) for c in cases]
    axes = axes_for(impl, "quick")
    for a, b in (("sinks", "softcap"), ("sinks", "grad"), ("softcap", "mask"), ("dv", "grad"), ("dv", "dtype"),
                 ("sinks", "dtype"), ("softcap", "dtype")):
        assert {(v[a], v[b]) for v in values} >= set(itertools.product(axes[a], axes[b])), (a, b)
    assert not any(c.softcap is not None and c.bias != "none" for c in cases)
    assert {c.sinks for c in pairwise_cases(_impl(**FULL), "quick", "cpu")} == {False}  # not declared: not drawn
