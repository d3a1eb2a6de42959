"""BROKEN (packed causal): keeps packed sequences apart, but applies causality to the packed positions, not
inside each sequence: right whenever every earlier sequence has as many queries as keys, wrong otherwise."""
import sys
from pathlib import Path

import torch

from harness import register

sys.path.insert(0, str(Path(__file__).parent))
from _reference import attend, band


@register("broken_varlen_global_causal", backend="torch", causal=True, mask=True, gqa=True,
          structures=("varlen",))
def broken_varlen_global_causal(q, k, v, *, causal=False, mask=None, scale=None, cu_seqlens_q=None,
                                cu_seqlens_k=None):
    tq, tk = q.shape[-2], k.shape[-2]
    allowed = band(tq, tk, causal=causal, window=None, causal_align="top_left")  # BUG: over the whole pack
    if cu_seqlens_q is not None:
        same = torch.zeros(tq, tk, dtype=torch.bool)
        for q0, q1, k0, k1 in zip(cu_seqlens_q.tolist(), cu_seqlens_q.tolist()[1:], cu_seqlens_k.tolist(),
                                  cu_seqlens_k.tolist()[1:]):
            same[q0:q1, k0:k1] = True
        allowed &= same
    return attend(q, k, v, mask=allowed if mask is None else allowed & mask, scale=scale)
