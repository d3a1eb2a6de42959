"""Broken: a chunk of a prompt attends only its own tokens, not the prefix cached before it.

Right for a whole prompt; a decode step sees only itself.
"""
from __future__ import annotations

import torch
from _serving_core import bottom_right, per_request

from harness import register


def _new_keys_only(nq: int, nk: int) -> torch.Tensor:
    return bottom_right(nq, nk) & (torch.arange(nk)[None, :] >= nk - nq)


@register("broken_serving_chunk_without_prefix", backend="torch", causal=True, structures=("varlen", "bottom_right"))
def broken_serving_chunk_without_prefix(q, k, v, *, causal=False, mask=None, scale=None, cu_seqlens_q=None,  # type: ignore[no-untyped-def]
                                        cu_seqlens_k=None, causal_align="top_left"):
    return per_request(q, k, v, scale, cu_seqlens_q, cu_seqlens_k, _new_keys_only)
