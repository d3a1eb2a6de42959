"""Broken: for GQA groups wider than 4, query heads are dealt to kv heads round-robin.

A kernel with a special path for wide groups (one CTA loads one kv head and serves up to 8 query
heads) builds its head map as ``h % Hkv`` instead of ``h // G``. Groups of 2, 3 and 4 take the
ordinary path and are right; so is MQA (Hkv = 1, where both maps give 0). Wrong only for G > 4
with more than one kv head (Llama-2 70B: 64 query heads on 8 kv heads).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from harness import register

sys.path.insert(0, str(Path(__file__).parent))
from _core import attend, causal_and_mask


@register("broken_gqa_wide_groups_modulo", backend="torch", dtypes=("float32", "bfloat16"), causal=True, mask=True,
          gqa=True)
def broken_gqa_wide_groups_modulo(q, k, v, *, causal=False, mask=None, scale=None):  # type: ignore[no-untyped-def]
    heads, tq, d = q.shape[1], q.shape[2], q.shape[3]
    kv_heads, tk = k.shape[1], k.shape[2]
    g = heads // kv_heads
    if g > 4:  # the bug: round-robin instead of contiguous groups
        index = torch.arange(heads, device=q.device) % kv_heads
    else:
        index = torch.arange(heads, device=q.device) // g
    k, v = k[:, index], v[:, index]
    scale = 1.0 / float(d) ** 0.5 if scale is None else float(scale)
    allowed = causal_and_mask(tq, tk, causal, mask, q.device)
    return attend(q, k, v, scale, allowed)
