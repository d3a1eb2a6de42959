"""Broken: the cached prefix's offset taken with the wrong sign (key j <= i - (kv - q) instead of i + (kv - q)).

Right for a prompt (kv == q); a chunk, a decode step and a speculative step lose their cached keys.
"""
from __future__ import annotations

import torch
from _serving_core import per_request

from harness import register


def _wrong_sign(nq: int, nk: int) -> torch.Tensor:
    i = torch.arange(nq)[:, None]
    return torch.arange(nk)[None, :] <= i - (nk - nq)


@register("broken_serving_prefix_sign", backend="torch", causal=True, structures=("varlen", "bottom_right"))
def broken_serving_prefix_sign(q, k, v, *, causal=False, mask=None, scale=None, cu_seqlens_q=None,  # type: ignore[no-untyped-def]
                               cu_seqlens_k=None, causal_align="top_left"):
    return per_request(q, k, v, scale, cu_seqlens_q, cu_seqlens_k, _wrong_sign)
