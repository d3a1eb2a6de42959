"""BROKEN (hang): never returns for T = 97 with head dimension 64 and values of ordinary size (a deadlock, say)."""
import time

import torch

from harness import register


@register("broken_hang", backend="torch")
def broken_hang(q, k, v, *, causal=False, mask=None, scale=None):
    if q.shape[-1] == 64 and q.shape[-2] == 97 and float(q.abs().max()) < 10:
        time.sleep(3600)  # BUG: hangs on one shape
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    return torch.softmax((q @ k.transpose(-1, -2)) * scale, -1) @ v
