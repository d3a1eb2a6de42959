"""A returned log-sum-exp (``Conventions(returns="out_lse")``) is checked against the float64 oracle's.

Kernels here return ``(out, lse)`` as FlashAttention (natural log, (B, H, Tq)), xformers (Tq padded) and exp2-based
Triton kernels (base 2) do; each passes once its LSE convention is declared, and each known-bad LSE (an unscaled
one, the mask ignored in it, base 2 declared as e, a sink left out) fails with a reason naming the LSE while its
output still passes.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from harness import Conventions, register
from harness.case.attention import AttentionCase
from harness.errors import PluginError
from harness.reference.oracle import reference_lse
from harness.verify.case_checks import check_kernel_case
from harness.verify.lse import check_lse

pytestmark = pytest.mark.tier  # results depend on the CPU's tier: CI runs it again capped (scripts/at_tier.py)

CAPS = dict(backend="torch", dtypes=("float32", "float64", "bfloat16"), causal=True, mask=True, gqa=True, sinks=True,
            softcap=True)


def scores_of(q, k, *, causal, mask, scale, softcap=None, sinks=None):
    """Logits as a FlashAttention-style kernel forms them, masked with -inf; q (B, H, Tq, d), kv head h // g."""
    k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    s = q @ k.transpose(-1, -2) * scale
    if softcap is not None:
        s = softcap * torch.tanh(s / softcap)
    tq, tk = s.shape[-2:]
    if causal:
        s = s.masked_fill(~torch.ones(tq, tk, dtype=torch.bool, device=q.device).tril(), float("-inf"))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    if sinks is not None:
        s = torch.cat([s, sinks.reshape(1, -1, 1, 1).expand(*s.shape[:-1], 1).to(s.dtype)], dim=-1)
    return s


def attention_and_lse(q, k, v, s):
    v = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)
    s = s.to(torch.promote_types(s.dtype, torch.float32))  # float32 at least, as FlashAttention's softmax_lse
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse[..., None]).nan_to_num(0.0)[..., :v.shape[-2]]
    return (p.to(q.dtype) @ v), lse


def flash_style(q, k, v, *, causal=False, mask=None, scale=None, sinks=None, softcap=None):
    """(out, lse) with lse (B, H, Tq), natural log, float32; +inf where a row has no key (FlashAttention 2)."""
    out, lse = attention_and_lse(q, k, v, scores_of(q, k, causal=causal, mask=mask, scale=scale, softcap=softcap,
                                                    sinks=sinks))
    return out, lse.masked_fill(torch.isneginf(lse), float("inf"))


def base2_padded(q, k, v, *, causal=False, mask=None, scale=None, sinks=None, softcap=None):
    """(out, lse) with lse (B, Tq_padded, H) in base 2 (an exp2 kernel's M), Tq padded to a multiple of 32."""
    out, lse = attention_and_lse(q, k, v, scores_of(q, k, causal=causal, mask=mask, scale=scale, softcap=softcap,
                                                    sinks=sinks))
    lse2 = lse / math.log(2.0)
    pad = -lse2.shape[-1] % 32
    return out, torch.nn.functional.pad(lse2, (0, pad)).transpose(1, 2)


def unscaled_lse(q, k, v, *, causal=False, mask=None, scale=None, sinks=None, softcap=None):
    """A right output, and the LSE of the logits before the scale: wrong."""
    out, _ = flash_style(q, k, v, causal=causal, mask=mask, scale=scale, sinks=sinks, softcap=softcap)
    return out, torch.logsumexp(scores_of(q, k, causal=causal, mask=mask, scale=1.0, sinks=sinks), dim=-1)


def mask_ignored_lse(q, k, v, *, causal=False, mask=None, scale=None, sinks=None, softcap=None):
    """A right output, and the LSE over every key: wrong where the mask or causal masking removes keys."""
    out, _ = flash_style(q, k, v, causal=causal, mask=mask, scale=scale, sinks=sinks, softcap=softcap)
    return out, torch.logsumexp(scores_of(q, k, causal=False, mask=None, scale=scale, softcap=softcap, sinks=sinks),
                                dim=-1)


def sink_left_out(q, k, v, *, causal=False, mask=None, scale=None, sinks=None, softcap=None):
    """A right output, and the LSE without the sink's share of the denominator: wrong."""
    out, _ = flash_style(q, k, v, causal=causal, mask=mask, scale=scale, sinks=sinks, softcap=softcap)
    _, lse = flash_style(q, k, v, causal=causal, mask=mask, scale=scale, softcap=softcap)
    return out, lse


FLASH = Conventions(returns="out_lse")
CASES = [
    AttentionCase(heads=4, kv_heads=2, tq=13, tk=29, d=16, causal=True, scale=0.3),
    AttentionCase(batch=2, heads=4, tq=11, tk=17, d=8, mask="empty_rows"),
    AttentionCase(heads=2, tq=9, tk=15, d=8, sinks=True, causal=True),
    AttentionCase(heads=2, tq=12, tk=12, d=8, softcap=5.0, dtype="float64"),
    AttentionCase(heads=2, tq=40, tk=33, d=16, dtype="bfloat16", mask="key_padding", batch=2),
]


def impl_of(name: str, fn, conventions: Conventions):
    return register(name, **CAPS, conventions=conventions)(fn).__attnbench__


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
@pytest.mark.parametrize(("fn", "conventions"), [(flash_style, FLASH),
                                                 (base2_padded, Conventions(returns="out_lse", lse_base="2",
                                                                            lse_layout="BTH"))])
def test_a_right_lse_passes_in_its_declared_convention(case: AttentionCase, fn, conventions: Conventions) -> None:
    results = check_kernel_case(impl_of(fn.__name__, fn, conventions), case, 2)
    by_check = {r.check: r for r in results}
    assert by_check["output"].status == "pass", by_check["output"].reason
    lse = by_check["lse"]
    assert lse.status == "pass", lse.reason
    assert lse.metrics["lse_base"] == conventions.lse_base
    assert (lse.metrics["lse_empty_rows"] > 0) == (case.mask == "empty_rows")  # left out, and counted
    assert lse.metrics["max_abs_err"] <= lse.metrics["bound"]


@pytest.mark.parametrize(("fn", "conventions", "case"), [
    (unscaled_lse, FLASH, CASES[0]),
    (mask_ignored_lse, FLASH, CASES[0]),
    (mask_ignored_lse, FLASH, CASES[4]),
    (base2_padded, Conventions(returns="out_lse", lse_layout="BTH"), CASES[3]),  # base 2 declared as e
    (sink_left_out, FLASH, CASES[2]),
], ids=["unscaled", "mask-ignored", "mask-ignored-bf16", "base-2-as-e", "sink-left-out"])
def test_a_wrong_lse_fails_naming_the_lse_while_the_output_passes(fn, conventions: Conventions,
                                                                  case: AttentionCase) -> None:
    results = {r.check: r for r in check_kernel_case(impl_of(fn.__name__, fn, conventions), case, 1)}
    assert results["output"].status == "pass", results["output"].reason
    assert results["lse"].status == "fail"
    assert "LSE" in (results["lse"].reason or "")


def test_an_lse_in_the_kernels_head_order_is_brought_back() -> None:
    """A kernel reading kv head h % Hkv returns its LSE in its own head order: compared in the contract's."""
    def modulo_heads(q, k, v, *, causal=False, mask=None, scale=None):
        g = q.shape[1] // k.shape[1]
        k, v = k.repeat(1, g, 1, 1), v.repeat(1, g, 1, 1)  # (r kvh): head h reads h % Hkv
        return flash_style(q, k, v, causal=causal, mask=mask, scale=scale)

    impl = register("modulo_heads", backend="torch", dtypes=("float32",), causal=True, mask=True, gqa=True,
                    conventions=Conventions(returns="out_lse", gqa_head_map="h%Hkv"))(modulo_heads).__attnbench__
    case = AttentionCase(heads=8, kv_heads=2, tq=10, tk=21, d=8, causal=True)
    assert check_lse(impl, case, 1).status == "pass"


def test_a_missing_or_misshapen_lse_is_named() -> None:
    def no_pair(q, k, v, *, causal=False, mask=None, scale=None):
        out, lse = flash_style(q, k, v, causal=causal, mask=mask, scale=scale)
        return out, lse[:, :1]

    impl = register("no_pair", backend="torch", causal=True, mask=True, conventions=FLASH)(no_pair).__attnbench__
    result = check_lse(impl, AttentionCase(heads=2, tq=5, tk=5, d=8), 1)
    assert result.status == "fail" and "LSE shape (1, 1, 5)" in (result.reason or "")


def test_a_base_2_lse_is_said_plainly() -> None:
    assert any("base 2" in note for note in Conventions(returns="out_lse", lse_base="2").unusual())
    assert not Conventions(returns="out_lse").unusual()


def test_lse_fields_need_a_returned_lse() -> None:
    with pytest.raises(PluginError, match="returns='out_lse'"):
        Conventions(lse_base="2")
    with pytest.raises(PluginError, match="lse_base"):
        Conventions(returns="out_lse", lse_base="10")


def test_the_oracle_lse_is_the_log_of_the_softmax_denominator() -> None:
    """exp(lse) is the denominator: out * exp(lse) is the unnormalised sum, and the sink joins it."""
    gen = torch.Generator().manual_seed(3)
    q, k = (torch.randn(1, 2, 6, 4, generator=gen, dtype=torch.float64) for _ in range(2))
    sinks = torch.tensor([0.5, -1.0], dtype=torch.float64)
    s = q @ k.transpose(-1, -2) * 0.5
    s = s.masked_fill(~torch.ones(6, 6, dtype=torch.bool).tril(), float("-inf"))
    expected = torch.log(torch.exp(s).sum(-1) + torch.exp(sinks).reshape(1, 2, 1))
    torch.testing.assert_close(reference_lse(q, k, causal=True, sinks=sinks), expected, rtol=1e-14, atol=1e-14)
    rows = torch.tensor([0, 5])
    torch.testing.assert_close(reference_lse(q, k, causal=True, sinks=sinks, rows=rows), expected[:, :, rows])


def test_every_result_of_a_declared_kernel_names_its_conventions() -> None:
    """Properties too, not only the output: each verdict says which conventions it assumed."""
    impl = impl_of("flash_style_all", flash_style, FLASH)
    results = check_kernel_case(impl, AttentionCase(heads=2, tq=9, tk=9, d=8, causal=True), 1)
    assert len(results) > 2 and any(r.check.startswith("property:") for r in results)
    assert all(r.metrics["conventions"]["returns"] == "out_lse" for r in results)


def torch_flash_cpu(q, k, v, *, causal=False, mask=None, scale=None):
    """PyTorch's own CPU flash kernel (what F.scaled_dot_product_attention dispatches to), which returns
    ``(out, logsumexp)``: real code with a returned LSE. An internal op: it expects the contiguous inputs that
    SDPA hands it (strided ones give wrong outputs), so the cases here are contiguous."""
    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal, attn_mask=mask, scale=scale)


TORCH_FLASH = Conventions(returns="out_lse", mask_kind="additive", causal_with_mask=False, empty_row="mean_v")


@pytest.mark.parametrize("case", [AttentionCase(heads=2, tq=13, tk=29, d=16, causal=True, scale=0.3),
                                  AttentionCase(batch=2, heads=2, tq=11, tk=17, d=8, mask="key_padding"),
                                  AttentionCase(heads=2, tq=33, tk=33, d=64, dtype="bfloat16", causal=True)],
                         ids=lambda c: c.id)
def test_torch_cpu_flash_kernels_lse_passes_and_a_misdeclared_base_fails(case: AttentionCase) -> None:
    right = register("torch_flash_cpu", backend="torch", dtypes=("float32", "bfloat16"), causal=True, mask=True,
                     conventions=TORCH_FLASH)(torch_flash_cpu).__attnbench__
    assert check_lse(right, case, 2).status == "pass"
    wrong = register("torch_flash_cpu_base2", backend="torch", dtypes=("float32", "bfloat16"), causal=True, mask=True,
                     conventions=Conventions(returns="out_lse", mask_kind="additive", causal_with_mask=False,
                                             empty_row="mean_v", lse_base="2"))(torch_flash_cpu).__attnbench__
    result = check_lse(wrong, case, 1)
    assert result.status == "fail" and (result.reason or "").startswith("LSE")


# Independent correct LSE implementations: each forms its logits in its own summation order. On d = 80 with
# logits near 300 (q x5, k x3 at scale 1) a logit is a dot product whose terms are 20x its value, and each order
# rounds it differently from the baseline's matmul: the LSE bound must allow for the terms, not only |logit|.

def _logits(q, k, scale, causal, order):
    q, k = q.float(), k.float()
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    if order == "einsum":
        s = torch.einsum("bhqd,bhkd->bhqk", q, k)
    elif order == "broadcast":  # elementwise products and a reduction: torch's sum order, not a GEMM's
        s = (q[..., :, None, :] * k[..., None, :, :]).sum(-1)
    else:  # term by term from the last, in the input dtype: a tiled kernel's loop at its worst
        s = torch.zeros(*q.shape[:-1], k.shape[-2])
        qs, ks = (q, k) if order == "reverse" else (q.to(order), k.to(order))  # order: a dtype to sum in
        s = s.to(qs.dtype)
        for i in reversed(range(q.shape[-1])):
            s = s + qs[..., i:i + 1] * ks[..., i].unsqueeze(-2)
        s = s.float()
    s = s * scale
    if causal:
        tq, tk = s.shape[-2:]
        s = s.masked_fill(~torch.ones(tq, tk, dtype=torch.bool).tril(), float("-inf"))
    return s


def einsum_float32(q, k, v, *, causal=False, mask=None, scale=None):
    """Plain einsum in float32, max subtracted by hand."""
    s = _logits(q, k, scale, causal, "einsum")
    m = s.amax(-1, keepdim=True)
    p = torch.exp(s - m)
    total = p.sum(-1, keepdim=True)
    return torch.einsum("bhqk,bhkd->bhqd", p / total, v.float()).to(q.dtype), (m + torch.log(total))[..., 0]


def torch_logsumexp(q, k, v, *, causal=False, mask=None, scale=None):
    """torch.logsumexp over logits reduced elementwise."""
    s = _logits(q, k, scale, causal, "broadcast")
    return (torch.softmax(s, -1) @ v.float()).to(q.dtype), torch.logsumexp(s, -1)


def online_softmax(q, k, v, *, causal=False, mask=None, scale=None, block=4, order="reverse"):
    """A chunked online softmax (FlashAttention's loop), its logits summed term by term from the last."""
    tq, tk = q.shape[-2], k.shape[-2]
    m = torch.full(q.shape[:-1], float("-inf"))
    total = torch.zeros(q.shape[:-1])
    acc = torch.zeros(*q.shape[:-1], v.shape[-1])
    for j0 in range(0, tk, block):
        s = _logits(q, k[..., j0:j0 + block, :], scale, False, order)
        if causal:
            s = s.masked_fill(torch.arange(j0, j0 + s.shape[-1]) > torch.arange(tq)[:, None], float("-inf"))
        new = torch.maximum(m, s.amax(-1))
        safe = torch.where(torch.isinf(new), torch.zeros_like(new), new)
        p = torch.exp(s - safe[..., None])
        total = total * torch.exp(m - safe) + p.sum(-1)
        acc = acc * torch.exp(m - safe)[..., None] + p @ v[..., j0:j0 + block, :].float()
        m = new
    return (acc / total[..., None]).to(q.dtype), m + torch.log(total)


def accumulated_in_dtype(q, k, v, *, causal=False, mask=None, scale=None):
    """The online softmax with its dot products accumulated in the inputs' own dtype (bf16 or fp16 sums)."""
    return online_softmax(q, k, v, causal=causal, scale=scale, order=q.dtype)


CORRECT_LSES = [einsum_float32, torch_logsumexp, online_softmax, accumulated_in_dtype]
CANCELLING = [AttentionCase(tq=1, tk=7, d=80, inputs="large", scale=1.0),
              AttentionCase(tq=2, tk=5, d=80, inputs="large", scale=1.0),
              AttentionCase(tq=3, tk=9, d=80, inputs="large", scale=1.0, causal=True)]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_correct_lses_pass_where_logits_cancel_large_terms(dtype: str) -> None:
    """No false alarm on any correct implementation, and the shapes bite: without the bound's term for the dot
    products' terms (sqrt(d) * eps * sum_j p_j |scale| sum_i |q_i k_ji|) some of them are past it in float32."""
    from harness.reference.tolerance import EPS

    past_the_old_bound = []
    for fn in CORRECT_LSES:
        impl = register(f"{fn.__name__}_{dtype}", backend="torch", dtypes=(dtype,), causal=True,
                        conventions=FLASH)(fn).__attnbench__
        for case in CANCELLING:
            case = replace(case, dtype=dtype)
            result = check_lse(impl, case, 8)
            assert result.status == "pass", f"{fn.__name__} {case.id}: {result.reason}"
            m = result.metrics
            old_bound = m["bound"] - EPS[dtype] * m["lse_dot_terms"]
            past_the_old_bound += [(fn.__name__, case.id)] if m["max_abs_err"] > old_bound else []
    assert past_the_old_bound or dtype != "float32"


@pytest.mark.parametrize(("fn", "conventions"), [
    (unscaled_lse, FLASH), (mask_ignored_lse, FLASH), (sink_left_out, FLASH),
    (base2_padded, Conventions(returns="out_lse", lse_layout="BTH"))], ids=["unscaled", "mask", "sink", "base-2"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_a_wrong_lse_still_fails_at_a_large_head_dim(fn, conventions: Conventions, dtype: str) -> None:
    """The terms' allowance (it grows with d and eps) stays below what a wrong LSE is off by at d = 80."""
    case = AttentionCase(heads=2, tq=6, tk=9, d=80, causal=True, sinks=True, dtype=dtype)
    result = check_lse(impl_of(f"{fn.__name__}_{dtype}", fn, conventions), case, 1)
    assert result.status == "fail" and (result.reason or "").startswith("LSE"), result.reason


def test_the_oracle_lse_reads_a_grouped_kv_head_as_each_of_its_query_heads() -> None:
    """GQA's logits are formed per kv head over its group's query rows (no copy of K per query head, which at MLA
    decode's 128 heads on one latent is gigabytes): the same numbers as with K copied to every query head."""
    from harness.reference.oracle import expand_kv, reference_lse

    gen = torch.Generator().manual_seed(0)
    q = torch.randn(2, 8, 5, 16, generator=gen, dtype=torch.float64)
    k = torch.randn(2, 2, 9, 16, generator=gen, dtype=torch.float64)
    grouped, copied = reference_lse(q, k, causal=True), reference_lse(q, expand_kv(k, 8), causal=True)
    assert torch.allclose(grouped, copied, rtol=1e-13, atol=0.0)  # float64 sums of 16 terms: any BLAS's order
