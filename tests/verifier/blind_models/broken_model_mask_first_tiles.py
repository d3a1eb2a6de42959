"""BROKEN (after https://github.com/pytorch/pytorch/issues/162588, SDPA wrong with attn_mask at large sequence
lengths): the mask is applied to the first 1,024 keys only; key tiles past it are read unmasked. Right for every
mask over Tk <= 1,024 and for masks that mask nothing past key 1,024."""
import sys
from pathlib import Path

import torch

from harness import register

sys.path.insert(0, str(Path(__file__).parent))
from _core_model import allowed_keys, online


@register("broken_model_mask_first_tiles", backend="torch", dtypes=("float32",), causal=True, mask=True, gqa=True)
def broken_model_mask_first_tiles(q, k, v, *, causal=False, mask=None, scale=None):
    tk = k.shape[2]
    if mask is not None and tk > 1024:
        mask = mask.to(torch.bool).clone()
        mask[..., 1024:] = True  # BUG
    allowed = allowed_keys(q.shape[2], tk, batch=q.shape[0], causal=causal, mask=mask)
    return online(q, k, v, allowed, scale, block=256)
