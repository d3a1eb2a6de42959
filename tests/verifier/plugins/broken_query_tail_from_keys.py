"""BROKEN (tail length copied from the key side): query blocks of 32, the last one sized by Tk % 32."""
import sys
from pathlib import Path

import torch

from harness import register

sys.path.insert(0, str(Path(__file__).parent))
from _reference import attend


@register("broken_query_tail_from_keys", backend="torch", causal=True, mask=True, gqa=True)
def broken_query_tail_from_keys(q, k, v, *, causal=False, mask=None, scale=None):
    full = attend(q, k, v, causal=causal, mask=mask, scale=scale)
    tq, tk = q.shape[-2], k.shape[-2]
    tail = tk % 32  # BUG: should be tq % 32
    body = tq - tq % 32
    out = torch.zeros_like(full)
    out[..., :body, :] = full[..., :body, :]
    if tq % 32:
        end = min(tq, body + (tail or 32))
        out[..., body:end, :] = full[..., body:end, :]
    return out
