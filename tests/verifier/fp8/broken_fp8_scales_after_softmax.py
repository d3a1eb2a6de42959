"""Broken: K's scale applied after the softmax.

The logits are formed on K's stored values and K's scale multiplies the weights instead (as if it factored out of
attention, as V's does): softmax(s q.k) is not s softmax(q.k), so every scale but 1 gives a wrong answer.
"""
from __future__ import annotations

import torch
from _fp8_core import allowed_keys, by_group, dequantized, grouped, weights

from harness import register


@register("broken_fp8_scales_after_softmax", backend="torch", dtypes=("float32", "bfloat16"), causal=True, mask=True,
          gqa=True, kv_dtypes=("float8_e4m3fn", "float8_e5m2"), kv_scales=("tensor", "head", "token"))
def broken_fp8_scales_after_softmax(q, k, v, *, causal=False, mask=None, scale=None, k_scale=None,  # type: ignore[no-untyped-def]
                                    v_scale=None):
    heads, tq, d = q.shape[1], q.shape[2], q.shape[3]
    sm = d ** -0.5 if scale is None else float(scale)
    k8 = grouped(k.to(torch.float32), heads)
    s = grouped(by_group(k_scale).expand(*k.shape[:3], 1), heads).transpose(-1, -2)  # (B, H, 1, Tk)
    p = weights((q.to(torch.float32) @ k8.transpose(-1, -2)) * sm, allowed_keys(tq, k.shape[2], causal, mask))
    return ((p * s) @ grouped(dequantized(v, v_scale), heads)).to(q.dtype)  # the bug: K's scale on the weights
