"""BROKEN: packed sequences (cu_seqlens) build their block-diagonal mask once and cache it keyed on the totals
(Tq, Tk), not on the packing. Right for every first call of a shape; wrong for a second packing of the same
totals (the next batch of a data loader)."""
import sys
from pathlib import Path

import torch

from harness import register

sys.path.insert(0, str(Path(__file__).parent))
from _core_model import allowed_keys, plain

_CACHE = {}


@register("broken_model_packed_mask_cache", backend="torch", dtypes=("float32",), causal=True, mask=True, gqa=True,
          structures=("varlen",))
def broken_model_packed_mask_cache(q, k, v, *, causal=False, mask=None, scale=None, cu_seqlens_q=None, cu_seqlens_k=None):
    tq, tk = q.shape[2], k.shape[2]
    if cu_seqlens_q is None:
        allowed = allowed_keys(tq, tk, batch=q.shape[0], causal=causal, mask=mask)
    else:
        key = (tq, tk, causal)  # BUG: the packing is not part of the key
        if key not in _CACHE:
            _CACHE[key] = allowed_keys(tq, tk, batch=1, causal=causal, cu_seqlens_q=cu_seqlens_q,
                                       cu_seqlens_k=cu_seqlens_k)
        allowed = _CACHE[key] if mask is None else _CACHE[key] & mask.to(torch.bool)
    return plain(q, k, v, allowed, scale)
