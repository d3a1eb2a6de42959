"""Correct, without ever dequantizing the cache: the scales folded into the arithmetic, keys in blocks.

A kernel that reads FP8 in registers never writes ``stored * scale`` out: K's scale multiplies each logit
(``s_j q.k8_j``), V's each weight (``p_j t_j v8_j``) and never the softmax's denominator. Here over blocks of 13
keys with an online softmax (running max and sum, rescaled per block), in float32: the same answer in another
order, which the rule must accept for every scale layout.
"""
from __future__ import annotations

import torch
from _fp8_core import allowed_keys, by_group, grouped

from harness import register

BLOCK = 13


@register("correct_fp8_folded_scales", backend="torch", dtypes=("float32", "bfloat16"), causal=True, mask=True,
          gqa=True, kv_dtypes=("float8_e4m3fn", "float8_e5m2"), kv_scales=("tensor", "head", "token"))
def correct_fp8_folded_scales(q, k, v, *, causal=False, mask=None, scale=None, k_scale=None,  # type: ignore[no-untyped-def]
                              v_scale=None):
    b, heads, tq, d = q.shape
    tk = k.shape[2]
    sm = d ** -0.5 if scale is None else float(scale)
    rows = k.shape[:3] + (1,)
    sk = grouped(by_group(k_scale).expand(rows), heads).transpose(-1, -2)  # (B, H, 1, Tk): one per key
    sv = grouped(by_group(v_scale).expand(rows), heads).transpose(-1, -2)
    k8, v8 = grouped(k.to(torch.float32), heads), grouped(v.to(torch.float32), heads)
    allowed = allowed_keys(tq, tk, causal, mask)
    allowed = torch.ones(1, 1, tq, tk, dtype=torch.bool) if allowed is None else allowed.expand(b, heads, tq, tk)
    qf = q.to(torch.float32)
    top = torch.full((b, heads, tq, 1), float("-inf"))
    total = torch.zeros(b, heads, tq, 1)
    acc = torch.zeros(b, heads, tq, v.shape[-1])
    for j in range(0, tk, BLOCK):
        cols = slice(j, j + BLOCK)
        logits = (qf @ k8[:, :, cols].transpose(-1, -2)) * sm * sk[..., cols]
        logits = logits.masked_fill(~allowed[..., cols], float("-inf"))
        new_top = torch.maximum(top, logits.amax(-1, keepdim=True))
        safe = torch.where(torch.isfinite(new_top), new_top, torch.zeros_like(new_top))
        keep = torch.exp(top - safe)
        p = torch.exp(logits - safe)
        total = total * keep + p.sum(-1, keepdim=True)
        acc = acc * keep + (p * sv[..., cols]) @ v8[:, :, cols]  # V's scale on the weights, not the denominator
        top = new_top
    out = torch.where(total > 0, acc / torch.where(total > 0, total, torch.ones_like(total)), torch.zeros_like(acc))
    return out.to(q.dtype)
