"""The xformers adapter's translation, tested for real though xformers has no CPU kernel here.

Layout and bias translation are plain torch: we check them against xformers' own bias
``materialize`` and by running the translated inputs through a BMHK reference that follows
xformers' documented semantics, compared with the oracle.
"""

from __future__ import annotations

import pytest
import torch

from harness.case.attention import AttentionCase
from harness.reference.oracle import reference_attention
from harness.reference.tensors import make_inputs
from implementations.xformers_memeff import _available, additive_bias, from_xformers, to_xformers

fmha = pytest.importorskip("xformers.ops.fmha")


def bmhk_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: object, scale: float) -> torch.Tensor:
    """xformers' semantics: (B, M, [G,] H, K) inputs, bias tensor or AttentionBias added to the scores."""
    q, k, v = (x.movedim(1, -2).to(torch.float64) for x in (q, k, v))  # (B, [G,] H, M, K)
    scores = q @ k.transpose(-1, -2) * scale
    if isinstance(bias, torch.Tensor):
        scores = scores + bias.to(torch.float64)
    elif bias is not None:
        scores = scores + bias.materialize(scores.shape, dtype=torch.float64)
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return (weights @ v).movedim(-2, 1)


CASES = [
    AttentionCase(batch=2, heads=4, tq=12, tk=20, d=8),
    AttentionCase(batch=2, heads=4, tq=16, d=8, causal=True),
    AttentionCase(batch=2, heads=4, tq=12, tk=21, d=8, mask="random"),
    AttentionCase(batch=2, heads=4, tq=12, d=8, mask="empty_rows", causal=True),
    AttentionCase(batch=2, heads=8, kv_heads=2, tq=12, tk=13, d=8, mask="key_padding"),
    AttentionCase(batch=1, heads=8, kv_heads=1, tq=10, d=8, causal=True),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_translation_reproduces_the_oracle(case: AttentionCase) -> None:
    inputs = make_inputs(case, seed=5)
    qx, kx, vx, bias = to_xformers(inputs.q, inputs.k, inputs.v, causal=case.causal, mask=inputs.mask)
    assert qx.ndim == (5 if case.kv_heads != case.heads else 4)
    out = bmhk_reference(qx, kx, vx, bias, case.effective_scale)
    out = from_xformers(out, inputs.q.to(torch.float64), causal=case.causal, mask=inputs.mask)
    expected = reference_attention(inputs.q64, inputs.k64, inputs.v64, causal=case.causal, mask=inputs.mask64)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)


STRUCTURED = [  # (case, the xformers class expected; None: the additive tensor bias)
    (AttentionCase(heads=2, tq=9, tk=13, d=8, causal=True, causal_align="bottom_right"), "LowerTriangularFromBottomRightMask"),
    (AttentionCase(heads=2, tq=13, tk=9, d=8, causal=True, causal_align="bottom_right"), "LowerTriangularFromBottomRightMask"),
    (AttentionCase(heads=2, tq=16, d=8, causal=True, window=(3, 0)), "LowerTriangularFromBottomRightLocalAttentionMask"),
    (AttentionCase(heads=2, tq=9, tk=13, d=8, causal=True, window=(3, 0), causal_align="bottom_right"),
     "LowerTriangularFromBottomRightLocalAttentionMask"),
    (AttentionCase(heads=2, tq=9, tk=13, d=8, window=(2, 3), causal_align="bottom_right"), "LocalAttentionFromBottomRightMask"),
    (AttentionCase(heads=2, tq=16, d=8, window=(0, 0)), "LocalAttentionFromBottomRightMask"),
    (AttentionCase(heads=2, tq=9, tk=13, d=8, window=(2, 3)), None),  # top-left window, Tq != Tk: no class
    (AttentionCase(heads=4, kv_heads=2, tq=17, tk=25, d=8, varlen=((3, 9), (12, 12), (2, 4))), "BlockDiagonalMask"),
    (AttentionCase(heads=2, tq=17, tk=25, d=8, varlen=((3, 9), (12, 12), (2, 4)), causal=True), "BlockDiagonalCausalMask"),
    (AttentionCase(heads=2, tq=17, tk=25, d=8, varlen=((3, 9), (12, 12), (2, 4)), causal=True,
                   causal_align="bottom_right"), "BlockDiagonalCausalFromBottomRightMask"),
    (AttentionCase(heads=2, tq=17, tk=25, d=8, varlen=((3, 9), (12, 12), (2, 4)), causal=True, window=(2, 0)),
     "BlockDiagonalCausalLocalAttentionMask"),
    (AttentionCase(heads=2, tq=17, tk=25, d=8, varlen=((3, 9), (12, 12), (2, 4)), causal=True, window=(2, 0),
                   causal_align="bottom_right"), "BlockDiagonalCausalLocalAttentionFromBottomRightMask"),
    (AttentionCase(heads=2, tq=17, tk=13, d=8, varlen=((3, 9), (12, 4), (2, 0)), causal=True,
                   causal_align="bottom_right"), None),  # fewer keys than queries in a block: xformers refuses
    (AttentionCase(batch=2, heads=2, tq=9, tk=13, d=8, causal=True, causal_align="bottom_right", mask="key_padding"), None),
    (AttentionCase(tq=2, tk=1, d=1, causal=True, window=(0, 0), varlen=((2, 1),)), None),  # a query the window leaves no key
]


@pytest.mark.parametrize("case,kind", STRUCTURED, ids=lambda x: x.id if isinstance(x, AttentionCase) else str(x))
def test_structures_are_xformers_own_bias_classes(case: AttentionCase, kind: str | None) -> None:
    """The structure as xformers' class where one expresses it (materialised by xformers itself), else the
    additive tensor; either way, through xformers' semantics, the oracle's answer (empty rows zero)."""
    inputs = make_inputs(case, seed=3)
    structure = {"window": case.window, "causal_align": case.causal_align, "varlen": case.varlen}
    qx, kx, vx, bias = to_xformers(inputs.q, inputs.k, inputs.v, causal=case.causal, mask=inputs.mask, **structure)
    if kind is None:
        assert isinstance(bias, torch.Tensor)
    else:
        assert type(bias).__name__ == kind and type(bias) is getattr(fmha.attn_bias, kind)
    out = bmhk_reference(qx, kx, vx, bias, case.effective_scale)
    out = from_xformers(out, inputs.q.to(torch.float64), causal=case.causal, mask=inputs.mask, tk=case.tk, **structure)
    expected = reference_attention(inputs.q64, inputs.k64, inputs.v64, **inputs.oracle_kwargs(case))
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)


def test_the_plugin_takes_every_structure() -> None:
    from harness.contract.discovery import load_registry

    assert set(load_registry().get("xformers_memeff").declared.structures) == {"window", "bottom_right", "varlen"}


def test_causal_is_xformers_lower_triangular_mask() -> None:
    q = torch.zeros(1, 2, 5, 8)
    _, _, _, bias = to_xformers(q, q, q, causal=True)
    assert isinstance(bias, fmha.attn_bias.LowerTriangularMask)
    ours = additive_bias(1, 2, 2, 5, 5, causal=True, mask=None, dtype=torch.float32, device=torch.device("cpu"))
    torch.testing.assert_close(ours, bias.materialize((1, 2, 5, 5), dtype=torch.float32))


def test_bias_buffer_is_padded_to_a_multiple_of_8() -> None:
    bias = additive_bias(1, 2, 2, 3, 13, causal=False, mask=None, dtype=torch.float16, device=torch.device("cpu"))
    assert bias.shape == (1, 2, 3, 13) and bias.stride(-2) % 8 == 0


def test_reason_is_xformers_own_answer() -> None:
    reason = _available(AttentionCase(dtype="float32"))
    if torch.cuda.is_available():
        pytest.skip("a CUDA machine may run xformers")
    assert reason is not None and "device=cpu" in reason
