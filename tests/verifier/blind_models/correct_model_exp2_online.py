"""CORRECT, unusual: FlashAttention's exp2 form. Logits are scaled by scale * log2(e) and exponentiated with exp2
in an online softmax over key blocks of 64, float32 throughout for half inputs. Same softmax, other roundings."""
import sys
from pathlib import Path

import torch

from harness import register

sys.path.insert(0, str(Path(__file__).parent))
from _core_model import allowed_keys

LOG2E = 1.4426950408889634


@register("correct_model_exp2_online", backend="torch", dtypes=("float32", "bfloat16", "float16"), causal=True, mask=True,
          gqa=True, bias=True)
def correct_model_exp2_online(q, k, v, *, causal=False, mask=None, scale=None, bias=None):
    b, h, tq, d = q.shape
    tk = k.shape[2]
    g = h // k.shape[1]
    k, v = k.repeat_interleave(g, 1).float(), v.repeat_interleave(g, 1).float()
    scale = d ** -0.5 if scale is None else float(scale)
    allowed = allowed_keys(tq, tk, batch=b, causal=causal, mask=mask)
    allowed = torch.ones(1, 1, tq, tk, dtype=torch.bool) if allowed is None else allowed
    allowed = allowed.expand(b, h, tq, tk)
    qf = q.float() * (scale * LOG2E)
    top = torch.full((b, h, tq, 1), float("-inf"))
    total = torch.zeros(b, h, tq, 1)
    acc = torch.zeros(b, h, tq, d)
    for lo in range(0, tk, 64):
        keys = slice(lo, min(lo + 64, tk))
        s = qf @ k[:, :, keys].transpose(-1, -2)
        if bias is not None:
            s = s + bias.float().expand(b, h, tq, tk)[..., keys] * LOG2E
        s = s.masked_fill(~allowed[..., keys], float("-inf"))
        new = torch.maximum(top, s.amax(-1, keepdim=True))
        ref = torch.where(torch.isfinite(new), new, torch.zeros_like(new))
        p = torch.exp2(s - ref)
        fix = torch.where(torch.isfinite(top), torch.exp2(top - ref), torch.zeros_like(top))
        total = total * fix + p.sum(-1, keepdim=True)
        acc = acc * fix + p @ v[:, :, keys]
        top = new
    return torch.where(total > 0, acc / total.clamp_min(1e-38), torch.zeros_like(acc)).to(q.dtype)
