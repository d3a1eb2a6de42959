"""Declared conventions (harness.contract.conventions), gradients by .backward(), and the 2025 case space (sinks, soft-cap, dv).

Kernels here are written in their own conventions, as a third-party package would be, and must pass once those
are declared; the same kernel declared with the contract's conventions must fail (the declaration is what the
verdict rests on).
"""

from __future__ import annotations

import functools
import importlib.util
import math
import types
from pathlib import Path

import pytest
import torch
import torch.utils.checkpoint

from harness import Conventions, register
from harness.bench.tasks import timing_task
from harness.bench.timing import TimingConfig
from harness.case.attention import AttentionCase
from harness.errors import PluginError
from harness.reference.flops import attention_flops, compulsory_bytes
from harness.reference.oracle import reference_attention
from harness.verify.checks import check_grad, check_output, guarded

ROOT = Path(__file__).resolve().parent.parent
PLUGINS_2025 = str(ROOT / "tests" / "data" / "plugins_2025" / "kernels_2025.py")


def _module(path: Path | str, name: str) -> types.ModuleType:
    """A plugin file imported as a module of its own (its functions, as this process calls them directly)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_KERNELS_2025 = _module(PLUGINS_2025, "kernels_2025")


def foreign_kernel(q, k, v, *, causal=False, mask=None):
    """Attention in someone else's conventions: (B, T, H, d) in and out; query head h reads kv head h % Hkv;
    causal aligned bottom-right; no scale parameter (1/sqrt(d)); an additive float mask; a row with no allowed
    key gets the mean of V (a finite masked logit)."""
    q, k, v = (x.transpose(1, 2) for x in (q, k, v))
    heads, kv_heads = q.shape[1], k.shape[1]
    k, v = (x.repeat(1, heads // kv_heads, 1, 1) for x in (k, v))  # (r kvh): head h reads h % Hkv
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores + mask
    if causal:
        tq, tk = scores.shape[-2:]
        scores = scores.masked_fill(torch.ones(tq, tk, dtype=torch.bool).triu(tk - tq + 1), torch.finfo(q.dtype).min)
    return (torch.softmax(scores, dim=-1) @ v).transpose(1, 2)


FOREIGN = Conventions(layout="BTHD", gqa_head_map="h%Hkv", causal_align="bottom_right", takes_scale=False,
                      mask_kind="additive", empty_row="mean_v")
CAPS = dict(backend="torch", dtypes=("float32", "float64"), causal=True, mask=True, gqa=True, grad=True)
declared = register("foreign_declared", **CAPS, conventions=FOREIGN)(foreign_kernel)
CASES = [
    AttentionCase(heads=8, kv_heads=2, tq=13, tk=29, d=16, causal=True, scale=0.3),
    AttentionCase(heads=6, kv_heads=3, tq=29, tk=13, d=8, causal=True),  # Tq > Tk top-left: folded into the mask
    AttentionCase(heads=4, kv_heads=2, tq=21, tk=21, d=8, mask="random", mask_rank="3d"),
    AttentionCase(batch=2, heads=4, kv_heads=2, tq=11, tk=17, d=8, mask="empty_rows", causal=True),
    AttentionCase(heads=4, kv_heads=2, tq=7, tk=19, d=8, causal=True, causal_align="bottom_right"),
    AttentionCase(heads=4, kv_heads=2, tq=9, tk=15, d=8, causal=True, grad=True, mask="key_padding", batch=2),
    AttentionCase(heads=4, kv_heads=2, tq=12, tk=12, d=8, grad=True, layout="transposed"),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_a_kernel_in_its_own_conventions_passes_once_they_are_declared(case: AttentionCase) -> None:
    impl = declared.__attnbench__
    assert impl.not_supported_reasons(case) == []
    result = check_grad(impl, case, 1) if case.grad else check_output(impl, case, 2)
    assert result.status == "pass", result.reason
    assert result.metrics["conventions"]["gqa_head_map"] == "h%Hkv"  # the verdict says what it assumed
    if case.grad:
        assert result.metrics["grad_via"] == "backward"
    if case.mask == "empty_rows":
        assert result.metrics.get("empty_row_expected") == "mean_v"


def test_the_same_kernel_without_its_declaration_fails() -> None:
    """Each convention matters on its own: declared away one at a time, the verdict turns to fail."""
    case = AttentionCase(heads=8, kv_heads=2, tq=13, tk=29, d=16, causal=True, scale=0.3, mask="empty_rows")
    for field in ("layout", "gqa_head_map", "causal_align", "takes_scale", "empty_row"):
        contract = Conventions()
        wrong = Conventions(**{**FOREIGN.describe(), field: getattr(contract, field), "out_layout": ""})
        copy = functools.wraps(foreign_kernel)(lambda *a, **kw: foreign_kernel(*a, **kw))
        try:
            impl = register(f"foreign_no_{field.replace('_', '')}", **CAPS, conventions=wrong)(copy).__attnbench__
        except PluginError as exc:  # takes_scale: the signature has no scale=, said at registration
            assert field == "takes_scale" and "scale" in str(exc)
            continue
        assert impl.not_supported_reasons(case) == []
        assert guarded("output", functools.partial(check_output, impl, case, 1)).status in ("fail", "error"), field


def test_unusual_conventions_are_said_plainly() -> None:
    notes = " ".join(FOREIGN.unusual())
    assert "h % Hkv" in notes and "mixes heads" in notes
    assert "bottom-right" in notes and "mean of V" in notes
    assert Conventions().unusual() == []
    assert declared.__attnbench__.capabilities()["conventions"]["layout"] == "BTHD"


@pytest.mark.parametrize(("kwargs", "named"), [
    ({"layout": "BSHD"}, "layout"), ({"gqa_head_map": "h/g"}, "gqa_head_map"), ({"empty_row": "zero"}, "empty_row"),
    ({"mask_kind": "float"}, "mask_kind"), ({"takes_scale": 1}, "takes_scale"), ({"returns": "lse"}, "returns"),
])
def test_a_bad_declaration_names_the_field_and_the_choices(kwargs: dict[str, object], named: str) -> None:
    with pytest.raises(PluginError, match=named):
        Conventions(**kwargs)  # type: ignore[arg-type]


def test_the_signature_is_checked_against_the_declared_conventions() -> None:
    copy = functools.wraps(foreign_kernel)(lambda *a, **kw: foreign_kernel(*a, **kw))
    with pytest.raises(PluginError, match="scale"):  # the contract's conventions pass scale=
        register("no_scale", **CAPS)(copy)
    with pytest.raises(PluginError, match="conventions= are declared by torch kernels"):
        register("numpy_conv", backend="numpy", conventions=FOREIGN)(copy)


def test_unspecified_empty_rows_are_skipped_and_said() -> None:
    def zeros_there_or_not(q, k, v, *, causal=False, mask=None, scale=None):
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
        return out.masked_fill(~mask.any(-1, keepdim=True), 123.0)  # whatever: its value is not specified

    conv = Conventions(empty_row="unspecified")
    impl = register("unspecified_rows", backend="torch", mask=True, conventions=conv)(zeros_there_or_not).__attnbench__
    case = AttentionCase(batch=2, heads=2, tq=9, tk=11, d=8, mask="empty_rows")
    result = check_output(impl, case, 1)
    assert result.status == "pass", result.reason
    assert result.metrics["empty_rows_skipped"] == "skipped: empty-row value unspecified"
    assert result.metrics["empty_rows"] >= 1
    contract = register("specified_rows", backend="torch", mask=True)(zeros_there_or_not).__attnbench__
    assert check_output(contract, case, 1).status == "fail"


def test_reentrant_checkpointing_is_never_failed_for_how_gradients_are_asked() -> None:
    def checkpointed(q, k, v, *, causal=False, mask=None, scale=None):
        def inner(q, k, v):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
        return torch.utils.checkpoint.checkpoint(inner, q, k, v, use_reentrant=True)

    impl = register("reentrant", backend="torch", causal=True, grad=True)(checkpointed).__attnbench__
    case = AttentionCase(heads=2, tq=17, d=8, causal=True, grad=True)
    with pytest.raises(RuntimeError, match="reentrant|use_reentrant"):  # what autograd.grad would have said
        q = torch.randn(1, 2, 4, 8, requires_grad=True)
        torch.autograd.grad(checkpointed(q, q, q).sum(), q)
    result = check_grad(impl, case, 2)
    assert result.status == "pass", result.reason
    assert result.metrics["grad_via"] == "backward"


def test_sinks_softcap_and_dv_oracle_semantics() -> None:
    """Independent of the oracle's code: the definitions written out on a tiny case."""
    gen = torch.Generator().manual_seed(0)
    q, k = (torch.randn(1, 2, 3, 4, generator=gen, dtype=torch.float64) for _ in range(2))
    v = torch.randn(1, 2, 3, 5, generator=gen, dtype=torch.float64)  # dv 5 != d 4
    sinks = torch.tensor([0.7, -1.2], dtype=torch.float64)
    logits = q @ k.transpose(-1, -2) / 2.0
    weights = torch.exp(logits) / (torch.exp(logits).sum(-1, keepdim=True) + torch.exp(sinks)[None, :, None, None])
    out = reference_attention(q, k, v, sinks=sinks)
    assert out.shape == (1, 2, 3, 5)
    torch.testing.assert_close(out, weights @ v, rtol=1e-12, atol=1e-12)
    none = reference_attention(q, k, v, sinks=torch.full((2,), float("-inf"), dtype=torch.float64))
    torch.testing.assert_close(none, reference_attention(q, k, v), rtol=1e-12, atol=1e-12)
    capped = torch.softmax(3.0 * torch.tanh(logits / 3.0), dim=-1) @ v
    torch.testing.assert_close(reference_attention(q, k, v, softcap=3.0), capped, rtol=1e-12, atol=1e-12)
    empty = torch.zeros(3, 3, dtype=torch.bool)
    assert reference_attention(q, k, v, mask=empty, sinks=sinks).abs().max() == 0  # all weight to the sink


def test_sinks_and_softcap_agree_with_transformers() -> None:
    """Cross-checked against the public reference: transformers' gpt-oss and Gemma 2 eager_attention_forward."""
    pytest.importorskip("transformers", reason="pip install 'attnbench[real]' for the cross-check")
    from transformers.models.gemma2.modeling_gemma2 import eager_attention_forward as gemma2
    from transformers.models.gpt_oss.modeling_gpt_oss import eager_attention_forward as gpt_oss

    gen = torch.Generator().manual_seed(1)
    q = torch.randn(2, 4, 5, 8, generator=gen, dtype=torch.float64) * 3
    k, v = (torch.randn(2, 2, 7, 8, generator=gen, dtype=torch.float64) for _ in range(2))
    sinks = torch.randn(4, generator=gen, dtype=torch.float64)
    allowed = torch.rand(2, 1, 5, 7, generator=gen) < 0.6
    additive = torch.zeros(2, 1, 5, 7, dtype=torch.float64).masked_fill(~allowed, float("-inf"))
    layer = types.SimpleNamespace(sinks=sinks, num_key_value_groups=2, training=False, head_dim=8)
    want, _ = gpt_oss(layer, q, k, v, additive, scaling=0.3)
    torch.testing.assert_close(reference_attention(q, k, v, mask=allowed, scale=0.3, sinks=sinks),
                               want.transpose(1, 2), rtol=1e-12, atol=1e-12)
    full = torch.zeros(2, 1, 5, 7, dtype=torch.float64)
    want, _ = gemma2(layer, q, k, v, full, scaling=0.3, softcap=2.0)  # its softmax runs in float32
    torch.testing.assert_close(reference_attention(q, k, v, scale=0.3, softcap=2.0), want.transpose(1, 2),
                               rtol=1e-6, atol=1e-6)


def sinks_softcap_kernel(q, k, v, *, causal=False, mask=None, scale=None, sinks=None, softcap=None):
    """The 2025 data plugin's kernel (``sinks_softcap_dv``, the one bench times below), called directly."""
    return _KERNELS_2025.sinks_softcap_dv(q, k, v, causal=causal, mask=mask, scale=scale, sinks=sinks, softcap=softcap)


full_2025 = register("full_2025", backend="torch", dtypes=("float32",), causal=True, mask=True, gqa=True, grad=True,
                     sinks=True, softcap=True, value_dim=True)(sinks_softcap_kernel)


@pytest.mark.parametrize("case", [
    AttentionCase(heads=4, kv_heads=2, tq=17, d=16, sinks=True, causal=True, grad=True),
    AttentionCase(batch=2, heads=2, tq=9, tk=13, d=8, sinks=True, mask="empty_rows"),
    AttentionCase(heads=2, tq=19, d=16, softcap=5.0, inputs="large", grad=True),
    AttentionCase(heads=4, kv_heads=2, tq=11, tk=7, d=24, dv=16, causal=True, grad=True),
], ids=lambda c: c.id)
def test_the_2025_case_space_verifies_with_gradients(case: AttentionCase) -> None:
    impl = full_2025.__attnbench__
    assert check_output(impl, case, 1).status == "pass"
    if case.grad:
        result = check_grad(impl, case, 1)
        assert result.status == "pass", result.reason


def test_a_wrong_sink_is_caught_in_the_output_and_the_gradient() -> None:
    def sink_ignored(q, k, v, *, causal=False, mask=None, scale=None, sinks=None):
        return sinks_softcap_kernel(q, k, v, causal=causal, mask=mask, scale=scale)

    def sink_detached(q, k, v, *, causal=False, mask=None, scale=None, sinks=None):
        return sinks_softcap_kernel(q, k, v, causal=causal, mask=mask, scale=scale, sinks=sinks.detach())

    case = AttentionCase(heads=2, tq=9, d=8, sinks=True, grad=True)
    ignored = register("sink_ignored", backend="torch", grad=True, sinks=True)(sink_ignored).__attnbench__
    assert check_output(ignored, case, 1).status == "fail"
    detached = register("sink_detached", backend="torch", grad=True, sinks=True)(sink_detached).__attnbench__
    assert check_output(detached, case, 1).status == "pass"
    result = check_grad(detached, case, 1)
    assert result.status == "fail" and "dsinks" in (result.reason or "")


def test_undeclared_features_are_skipped_with_a_reason() -> None:
    impl = declared.__attnbench__
    reasons = " ".join(impl.not_supported_reasons(AttentionCase(heads=2, tq=8, d=8, sinks=True)))
    assert "sinks" in reasons
    reasons = " ".join(impl.not_supported_reasons(AttentionCase(heads=2, tq=8, d=8, softcap=30.0)))
    assert "soft-capping" in reasons
    reasons = " ".join(impl.not_supported_reasons(AttentionCase(heads=2, tq=8, d=16, dv=8)))
    assert "value head dim" in reasons


def test_flops_and_bytes_count_v_with_its_own_head_dim() -> None:
    same = AttentionCase(heads=2, tq=8, tk=8, d=16)
    mla = AttentionCase(heads=2, tq=8, tk=8, d=24, dv=8)  # (24 + 8) / 2 = 16: the same work
    assert attention_flops(mla) == attention_flops(same) == 4 * 2 * 64 * 16
    item = 4
    assert compulsory_bytes(mla) == item * (2 * 8 * 24 + 2 * 8 * 8 + 2 * 8 * (24 + 8))
    assert mla.id.split("-")[3] == "d24dv8"
    assert AttentionCase(d=16, dv=16).dv == 0  # one case, one id


def _plugin(name: str) -> types.ModuleType:
    return _module(ROOT / "examples" / "real" / f"{name}.py", f"real_{name}")


REAL_CASES = [
    AttentionCase(heads=8, kv_heads=2, tq=13, tk=29, d=16, causal=True, scale=0.3),
    AttentionCase(batch=2, heads=4, kv_heads=2, tq=11, tk=17, d=8, mask="empty_rows"),
    AttentionCase(heads=4, kv_heads=2, tq=9, tk=15, d=8, causal=True, grad=True),
    AttentionCase(heads=3, tq=13, tk=29, d=16, causal=True),
    AttentionCase(batch=3, heads=2, tq=11, tk=17, d=8, mask="key_padding"),
    AttentionCase(heads=2, tq=9, tk=15, d=8, causal=True, grad=True),
]


@pytest.mark.parametrize("adapter", [("hf_attention", "declared_hf_llama_eager"), ("hf_attention", "declared_hf_sdpa"),
                                     ("x_transformers_attend", "xt_attend"), ("lucidrains", "lucidrains_memeff")])
def test_real_adapters_declare_and_pass(adapter: tuple[str, str]) -> None:
    """Real packages, declarations only: no failure that is only a convention."""
    pytest.importorskip({"hf_attention": "transformers", "x_transformers_attend": "x_transformers",
                         "lucidrains": "memory_efficient_attention_pytorch"}[adapter[0]],
                        reason="pip install 'attnbench[real]' to run the real adapters")
    impl = getattr(_plugin(adapter[0]), adapter[1]).__attnbench__
    ran = 0
    for case in REAL_CASES:
        if impl.not_supported_reasons(case):
            continue
        result = check_grad(impl, case, 1) if case.grad else check_output(impl, case, 1)
        assert result.status == "pass", f"{case.id}: {result.reason}"
        ran += 1
    assert ran >= 2


def test_the_real_local_attention_bug_is_still_found() -> None:
    """local-attention 1.11.2, non-causal, autopad=True, no mask: the padding keys are attended."""
    pytest.importorskip("local_attention", reason="pip install 'attnbench[real]' to run the real adapters")
    impl = _plugin("local_attention_plugin").local_attention.__attnbench__
    padded = AttentionCase(heads=2, tq=13, d=8, window=(4, 4))  # 13 is not a multiple of 4
    assert impl.not_supported_reasons(padded) == []
    assert check_output(impl, padded, 1).status == "fail"
    exact = AttentionCase(heads=2, tq=16, d=8, window=(4, 4))
    assert check_output(impl, exact, 1).status == "pass"


QUICK = TimingConfig(warmup_s=0.0, budget_s=0.05, min_samples=3, max_samples=5)


@pytest.mark.parametrize(("name", "case", "mode"), [
    ("reentrant_sdpa", AttentionCase(heads=2, tq=16, d=8, causal=True), "fwd+bwd"),
    ("reentrant_sdpa", AttentionCase(heads=2, tq=16, d=8), "bwd"),
    ("sinks_softcap_dv", AttentionCase(heads=4, kv_heads=2, tq=12, tk=20, d=24, dv=8, sinks=True, softcap=5.0), "fwd"),
    ("sinks_softcap_dv", AttentionCase(heads=2, tq=12, d=24, dv=8, causal=True), "fwd+bwd"),
])
def test_bench_times_and_checks_these_cells(name: str, case: AttentionCase, mode: str) -> None:
    """bench's timed backward is .backward() (re-entrant checkpointing runs), and its kept-call checks hold
    sinks, soft-capping and dv to the oracle: every cell is timed with no problem found."""
    timed = timing_task(name, PLUGINS_2025, case.to_dict(), mode, QUICK, 1)
    assert len(timed.samples_s) >= 3
    assert timed.integrity is not None
    assert not timed.integrity.output_problems and not timed.integrity.kept_problems
    assert timed.integrity.checked and all(c.max_abs_err is not None for c in timed.integrity.checked)


def test_sinks_follow_the_query_heads_under_another_head_map() -> None:
    """A sink belongs to a query head: permuted with the heads when the kernel reads kv head h % Hkv."""
    def foreign_sinks(q, k, v, *, causal=False, mask=None, scale=None, sinks=None):
        repeat = q.shape[1] // k.shape[1]
        k, v = (x.repeat(1, repeat, 1, 1) for x in (k, v))  # (r kvh): head h reads h % Hkv
        return sinks_softcap_kernel(q, k, v, causal=causal, mask=mask, scale=scale, sinks=sinks)

    impl = register("foreign_sinks", backend="torch", causal=True, gqa=True, grad=True, sinks=True,
                    conventions=Conventions(gqa_head_map="h%Hkv"))(foreign_sinks).__attnbench__
    case = AttentionCase(heads=6, kv_heads=2, tq=11, d=8, sinks=True, causal=True, grad=True)
    assert check_output(impl, case, 1).status == "pass"
    result = check_grad(impl, case, 1)
    assert result.status == "pass", result.reason


def test_reports_say_unusual_conventions_from_the_result_file() -> None:
    from harness.report.markdown import declared_conventions
    from harness.report.terminal import verify_table

    recorded = {"xt": {"conventions": FOREIGN.describe()}, "plain": {"kind": "kernel"},
                "newer": {"conventions": {**FOREIGN.describe(), "layout": "BSHD"}}}  # unreadable: left out
    notes = declared_conventions(recorded)
    assert {name for name, _ in notes} == {"xt"}
    assert any("mixes heads" in note for _, note in notes)
    table = verify_table([], 0.0, (), {"xt": FOREIGN.unusual()})
    assert "declared conventions" in table and "h % Hkv" in table
