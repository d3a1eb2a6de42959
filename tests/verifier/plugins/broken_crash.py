"""BROKEN (crash): aborts the process on T = 97 with head dimension 59 (a segfault in a native kernel, say)."""
import os

import torch

from harness import register


@register("broken_crash", backend="torch")
def broken_crash(q, k, v, *, causal=False, mask=None, scale=None):
    if q.shape[-1] == 59 and q.shape[-2] == 97:
        os.abort()  # BUG: dies on an odd head dim at one length
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    return torch.softmax((q @ k.transpose(-1, -2)) * scale, -1) @ v
