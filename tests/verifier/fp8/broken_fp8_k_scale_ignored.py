"""Broken: K's scale is never read.

V is dequantized and K is used as stored, as a kernel does that expects K's scale folded into the softmax scale by
its caller (some engines do fold it; the contract passes it as ``k_scale=``): right only when K's scale is 1.
"""
from __future__ import annotations

import torch
from _fp8_core import attend, dequantized

from harness import register


@register("broken_fp8_k_scale_ignored", backend="torch", dtypes=("float32", "bfloat16"), causal=True, mask=True,
          gqa=True, kv_dtypes=("float8_e4m3fn", "float8_e5m2"), kv_scales=("tensor", "head", "token"))
def broken_fp8_k_scale_ignored(q, k, v, *, causal=False, mask=None, scale=None, k_scale=None,  # type: ignore[no-untyped-def]
                               v_scale=None):
    return attend(q, k.to(torch.float32), dequantized(v, v_scale), causal=causal, mask=mask, scale=scale)
