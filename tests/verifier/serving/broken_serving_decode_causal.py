"""Broken: decode steps (one new token) given a top-left causal mask, so the token sees only the first cached key.

Right for every request with more than one new token.
"""
from __future__ import annotations

import torch
from _serving_core import bottom_right, per_request

from harness import register


def _decode_top_left(nq: int, nk: int) -> torch.Tensor:
    if nq == 1:
        return torch.arange(nk)[None, :] <= 0
    return bottom_right(nq, nk)


@register("broken_serving_decode_causal", backend="torch", causal=True, structures=("varlen", "bottom_right"))
def broken_serving_decode_causal(q, k, v, *, causal=False, mask=None, scale=None, cu_seqlens_q=None,  # type: ignore[no-untyped-def]
                                 cu_seqlens_k=None, causal_align="top_left"):
    return per_request(q, k, v, scale, cu_seqlens_q, cu_seqlens_k, _decode_top_left)
