"""Correct: each request on its own keys, its new tokens the last positions of its sequence."""
from __future__ import annotations

from _serving_core import bottom_right, per_request

from harness import register


@register("correct_serving_per_request", backend="torch", causal=True, structures=("varlen", "bottom_right"))
def correct_serving_per_request(q, k, v, *, causal=False, mask=None, scale=None, cu_seqlens_q=None,  # type: ignore[no-untyped-def]
                                cu_seqlens_k=None, causal_align="top_left"):
    return per_request(q, k, v, scale, cu_seqlens_q, cu_seqlens_k, bottom_right)
