"""Broken: per-head scales read along the token axis.

The scale is indexed with the key's position instead of its kv head (``k_scale[j % Hkv]``, a scale pointer stepped
with the token stride): right for MQA (one kv head, one scale), wrong wherever two kv heads have different scales.
"""
from __future__ import annotations

import torch
from _fp8_core import attend

from harness import register


def _by_token(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    hkv, t = x.shape[1], x.shape[2]
    per_token = scale.to(torch.float32)[torch.arange(t) % hkv]  # the bug: the token index picks the head's scale
    return x.to(torch.float32) * per_token.reshape(1, 1, t, 1)


@register("broken_fp8_head_scale_by_token", backend="torch", dtypes=("float32", "bfloat16"), causal=True, mask=True,
          gqa=True, kv_dtypes=("float8_e4m3fn", "float8_e5m2"), kv_scales=("head",))
def broken_fp8_head_scale_by_token(q, k, v, *, causal=False, mask=None, scale=None, k_scale=None,  # type: ignore[no-untyped-def]
                                   v_scale=None):
    return attend(q, _by_token(k, k_scale), _by_token(v, v_scale), causal=causal, mask=mask, scale=scale)
