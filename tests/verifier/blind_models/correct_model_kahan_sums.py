"""CORRECT, unusual: one pass over the keys in chunks of 32 with Kahan-compensated sums for the softmax
denominator and for P V (float32), after a first pass for the row maximum. More accurate than the textbook
order, in a different way."""
import sys
from pathlib import Path

import torch

from harness import register

sys.path.insert(0, str(Path(__file__).parent))
from _core_model import allowed_keys


@register("correct_model_kahan_sums", backend="torch", dtypes=("float32", "bfloat16", "float16"), causal=True, mask=True,
          gqa=True)
def correct_model_kahan_sums(q, k, v, *, causal=False, mask=None, scale=None):
    b, h, tq, d = q.shape
    tk = k.shape[2]
    g = h // k.shape[1]
    k, v = k.repeat_interleave(g, 1).float(), v.repeat_interleave(g, 1).float()
    scale = d ** -0.5 if scale is None else float(scale)
    s = (q.float() @ k.transpose(-1, -2)) * scale
    allowed = allowed_keys(tq, tk, batch=b, causal=causal, mask=mask)
    if allowed is not None:
        s = s.masked_fill(~allowed.expand(s.shape), float("-inf"))
    top = s.amax(-1, keepdim=True)
    top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
    total, total_c = torch.zeros(b, h, tq, 1), torch.zeros(b, h, tq, 1)
    acc, acc_c = torch.zeros(b, h, tq, d), torch.zeros(b, h, tq, d)
    for lo in range(0, tk, 32):
        keys = slice(lo, min(lo + 32, tk))
        p = torch.exp(s[..., keys] - top)
        y = p.sum(-1, keepdim=True) - total_c
        t = total + y
        total_c, total = (t - total) - y, t
        y = p @ v[:, :, keys] - acc_c
        t = acc + y
        acc_c, acc = (t - acc) - y, t
    return torch.where(total > 0, acc / total.clamp_min(1e-38), torch.zeros_like(acc)).to(q.dtype)
