"""CORRECT, unusual: FlashAttention-2's half-precision arithmetic. Scores and the running max in float32, P rounded
to the input dtype (bfloat16/float16) before the P V product, which accumulates in float32; the denominator is the
sum of the unrounded float32 P. Key blocks of 128."""
import sys
from pathlib import Path

import torch

from harness import register

sys.path.insert(0, str(Path(__file__).parent))
from _core_model import allowed_keys


@register("correct_model_half_p_fp32_acc", backend="torch", dtypes=("float32", "bfloat16", "float16"), causal=True,
          mask=True, gqa=True)
def correct_model_half_p_fp32_acc(q, k, v, *, causal=False, mask=None, scale=None):
    b, h, tq, d = q.shape
    tk = k.shape[2]
    g = h // k.shape[1]
    k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    scale = d ** -0.5 if scale is None else float(scale)
    allowed = allowed_keys(tq, tk, batch=b, causal=causal, mask=mask)
    allowed = torch.ones(1, 1, tq, tk, dtype=torch.bool) if allowed is None else allowed
    allowed = allowed.expand(b, h, tq, tk)
    top = torch.full((b, h, tq, 1), float("-inf"))
    total = torch.zeros(b, h, tq, 1)
    acc = torch.zeros(b, h, tq, d)
    for lo in range(0, tk, 128):
        keys = slice(lo, min(lo + 128, tk))
        s = (q.float() @ k[:, :, keys].float().transpose(-1, -2)) * scale
        s = s.masked_fill(~allowed[..., keys], float("-inf"))
        new = torch.maximum(top, s.amax(-1, keepdim=True))
        ref = torch.where(torch.isfinite(new), new, torch.zeros_like(new))
        p = torch.exp(s - ref)
        fix = torch.where(torch.isfinite(top), torch.exp(top - ref), torch.zeros_like(top))
        total = total * fix + p.sum(-1, keepdim=True)
        acc = acc * fix + p.to(q.dtype).float() @ v[:, :, keys].float()  # P in the input dtype, fp32 accumulate
        top = new
    return torch.where(total > 0, acc / total.clamp_min(1e-38), torch.zeros_like(acc)).to(q.dtype)
