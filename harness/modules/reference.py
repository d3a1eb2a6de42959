"""The module-level reference: PyTorch's own modules in float64 with the same weights.

``nn.MultiheadAttention(batch_first=True)`` called with ``need_weights=False`` and
``nn.TransformerEncoderLayer(activation="relu", dropout=0.0, batch_first=True)`` (post-LN
or pre-LN by ``norm_first``), both in *training* mode: with dropout 0 that changes no
number, and it keeps PyTorch off its inference fast path (``_native_multi_head_attention``,
nested tensors), so the reference is the plain math path. The same function run in the
case's dtype is the *baseline*, the error yardstick of the pass rule.

RoPE, grouped-query attention and a KV cache have no place in ``nn.MultiheadAttention``: for
those cases the reference is the same computation written out (``F.linear`` projections, :func:`harness.case.positional.apply_rope`
on each head's q and k, the float64 oracle, ``F.linear``); tests check that this
composition equals ``nn.MultiheadAttention`` to float64 rounding when there is no RoPE.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from harness.case.positional import apply_rope
from harness.modules.cases import ModuleCase
from harness.modules.weights import EncoderLayerWeights, ModuleInputs, MultiheadWeights
from harness.reference.oracle import expand_kv, reference_attention
from harness.reference.tensors import TORCH_DTYPES


def attention_masks(case: ModuleCase, mask: torch.Tensor | None, bias: torch.Tensor | None,
                    dtype: torch.dtype) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """``(attn_mask, key_padding_mask)`` in nn.MultiheadAttention's conventions.

    PyTorch's boolean masks mean True = *not allowed* (the opposite of attnbench's), and a
    float ``attn_mask`` of shape (B*H, T, T) is added to the scores, so ALiBi and causal
    go there together; key padding is made float too when the attn_mask is float
    (PyTorch deprecates mixing the two types).
    """
    t = case.seq
    attn_mask = torch.ones(t, t, dtype=torch.bool).triu(1) if case.causal else None
    padding = None if mask is None else ~mask.to(torch.bool)
    if bias is None:
        return attn_mask, padding
    additive = bias.to(dtype).expand(case.batch, case.heads, t, t).reshape(case.batch * case.heads, t, t)
    if attn_mask is not None:
        additive = additive.masked_fill(attn_mask, float("-inf"))
    if padding is not None:
        padding = torch.zeros(padding.shape, dtype=dtype).masked_fill(padding, float("-inf"))
    return additive, padding


def torch_module_output(case: ModuleCase, inputs: ModuleInputs, dtype: str = "float64") -> torch.Tensor:
    """The PyTorch module (or, with RoPE, its written-out composition) computed in ``dtype``."""
    tdtype = TORCH_DTYPES[dtype]
    x = inputs.x64.to(tdtype)
    weights = inputs.weights64.map(lambda t: t.to(tdtype))
    if case.rope != "none" or case.kv_heads != case.heads or case.past:  # nn.MultiheadAttention has none of these
        assert isinstance(weights, MultiheadWeights)
        past = None
        if inputs.past_key64 is not None and inputs.past_value64 is not None:
            past = (inputs.past_key64.to(tdtype), inputs.past_value64.to(tdtype))
        return composed_mha(case, x, weights, inputs.mask64, inputs.bias64, exact=dtype == "float64", past=past)
    attn_mask, padding = attention_masks(case, inputs.mask64, inputs.bias64, tdtype)
    with torch.no_grad():
        if isinstance(weights, EncoderLayerWeights):
            layer = torch.nn.TransformerEncoderLayer(
                case.d_model, case.heads, dim_feedforward=case.dim_ff, dropout=0.0, activation="relu",
                layer_norm_eps=weights.eps, batch_first=True, norm_first=weights.norm_first, dtype=tdtype)
            weights.load_into(layer)
            layer.train()  # dropout is 0: same numbers, but no inference fast path
            encoded: torch.Tensor = layer(x, src_mask=attn_mask, src_key_padding_mask=padding)
            return encoded
        mha = torch.nn.MultiheadAttention(case.d_model, case.heads, bias=case.proj_bias, batch_first=True,
                                          dtype=tdtype)
        weights.load_into(mha)
        mha.train()
        out: torch.Tensor = mha(x, x, x, key_padding_mask=padding, attn_mask=attn_mask, need_weights=False)[0]
        return out


def composed_mha(case: ModuleCase, x: torch.Tensor, w: MultiheadWeights, mask: torch.Tensor | None,
                 bias: torch.Tensor | None, *, exact: bool,
                 past: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    """Multi-head attention written out; ``exact`` uses the float64 oracle, else the same-dtype formula.

    Grouped-query attention splits the packed projection into Q (D rows), K and V (kv_heads x head_dim rows
    each); a KV cache ``past`` (keys, values) goes before the new keys, the new tokens are rotated at their
    positions after it, and causal masking is bottom-right."""
    from harness.reference.tolerance import baseline_attention

    b, t = case.batch, case.seq
    q, k, v = _heads(case, x, w, past)
    kernel_mask = None if mask is None else mask.to(torch.bool).reshape(b, 1, 1, case.keys)
    attend = reference_attention if exact else baseline_attention
    out = attend(q, k, v, causal=case.causal, mask=kernel_mask, bias=None if bias is None else bias.to(x.dtype),
                 causal_align="bottom_right" if case.past else "top_left")
    out = out.to(x.dtype).transpose(1, 2).reshape(b, t, case.d_model)
    return F.linear(out, w.out_proj_weight, w.out_proj_bias)


def _heads(case: ModuleCase, x: torch.Tensor, w: MultiheadWeights, past: tuple[torch.Tensor, torch.Tensor] | None
           ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Q (B, H, T, d), K and V (B, Hkv, past + T, d): projected, RoPE at the new positions, the cache before them."""
    b, t, h, hkv, d = case.batch, case.seq, case.heads, case.kv_heads, case.head_dim
    q, k, v = torch.split(F.linear(x, w.in_proj_weight, w.in_proj_bias), [case.d_model, case.kv_dim, case.kv_dim], dim=-1)
    q = q.reshape(b, t, h, d).transpose(1, 2)
    k, v = (y.reshape(b, t, hkv, d).transpose(1, 2) for y in (k, v))
    if case.rope != "none":
        q, k = apply_rope(q, case.rope, offset=case.past), apply_rope(k, case.rope, offset=case.past)
    if past is not None:
        k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)
    return q, k, v


def weighted_logit(case: ModuleCase, inputs: ModuleInputs) -> float:
    """max over (batch, head, query) of sum_j p_ij (1 - p_ij) |l_ij| (float64; 0 for encoder layers): what sizes
    the rule's ``eps * logit`` floor term for a module case.

    Logits l_j rounded to nearest in the case's dtype move by d_j, |d_j| <= eps |l_j| / 2; to first order the
    attention output moves by sum_j p_j (d_j - d) (v_j - o), d = sum_k p_k d_k, so by at most
    max|v_j - o| eps sum_j p_j (1 - p_j) |l_j| (|d_j - d| <= (1 - p_j) |d_j| + sum_{k != j} p_k |d_k|).
    Rounding matters only where the softmax spreads its weight: the max |logit| a kernel case uses would count
    ALiBi's far keys (a bias of -70 at weight e^-70) and a row's only key (weight 1, no error), and loosen the floor
    past what any rounding there can do."""
    if case.layer != "mha" or not isinstance(inputs.weights64, MultiheadWeights):
        return 0.0
    past = None if inputs.past_key64 is None or inputs.past_value64 is None else (inputs.past_key64, inputs.past_value64)
    q, k, _ = _heads(case, inputs.x64, inputs.weights64, past)
    logits = q @ expand_kv(k, case.heads).transpose(-1, -2) * case.head_dim ** -0.5
    if inputs.bias64 is not None:
        logits = logits + inputs.bias64
    allowed = torch.ones(case.seq, case.keys, dtype=torch.bool)
    if case.causal:
        allowed = allowed.tril(case.past)  # bottom-right over the cache (top-left without one)
    if inputs.mask64 is not None:
        allowed = allowed & inputs.mask64.to(torch.bool)[:, None, None, :]
    p = torch.softmax(logits.masked_fill(~allowed, float("-inf")), dim=-1).nan_to_num(0.0)
    return float((p * (1 - p) * logits.abs().masked_fill(~allowed, 0.0)).sum(-1).max())


def reference_output(case: ModuleCase, inputs: ModuleInputs) -> torch.Tensor:
    """The float64 reference for one trial."""
    return torch_module_output(case, inputs, "float64")


def baseline_output(case: ModuleCase, inputs: ModuleInputs) -> torch.Tensor:
    """The same computation in the case's dtype, as float64: the error yardstick."""
    return torch_module_output(case, inputs, case.dtype).to(torch.float64)
