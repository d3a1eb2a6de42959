"""Broken: per-token scales read token-major.

The contract lays per-token scales out as the cache's rows, (B, Hkv, Tk); this kernel reads them as (B, Tk, Hkv),
the layout of a cache stored token-major (a reshape where a transpose was needed): right for MQA, wrong for any
cache with two kv heads.
"""
from __future__ import annotations

import torch
from _fp8_core import attend

from harness import register


def _token_major(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    b, hkv, t = scale.shape
    s = scale.to(torch.float32).reshape(b, t, hkv).transpose(1, 2)  # the bug: the flat scales read (B, Tk, Hkv)
    return x.to(torch.float32) * s[..., None]


@register("broken_fp8_token_scale_token_major", backend="torch", dtypes=("float32", "bfloat16"), causal=True,
          mask=True, gqa=True, kv_dtypes=("float8_e4m3fn", "float8_e5m2"), kv_scales=("token",))
def broken_fp8_token_scale_token_major(q, k, v, *, causal=False, mask=None, scale=None, k_scale=None,  # type: ignore[no-untyped-def]
                                       v_scale=None):
    return attend(q, _token_major(k, k_scale), _token_major(v, v_scale), causal=causal, mask=mask, scale=scale)
