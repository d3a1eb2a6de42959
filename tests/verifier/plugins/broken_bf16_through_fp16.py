"""BROKEN (range): a bf16 path that computes in float16 inside, since both are 16-bit and float16 is
the more precise. It is, on randn: 10 mantissa bits against 7, every ordinary case passes. But
float16 tops out at 65504 where bfloat16 reaches 3e38, so values a bf16 model carries (activations
in the thousands and beyond) come out as Inf. Caught by the ``wide`` inputs."""
import sys
from pathlib import Path

import torch

from harness import register

sys.path.insert(0, str(Path(__file__).parent))
from _reference import attend


@register("broken_bf16_through_fp16", backend="torch", causal=True, mask=True, gqa=True, dtypes=("float32", "bfloat16"))
def broken_bf16_through_fp16(q, k, v, *, causal=False, mask=None, scale=None):
    if q.dtype == torch.bfloat16:  # BUG: float16 has bf16's width, not its range
        q, k, v = q.half(), k.half(), v.half()
    return attend(q, k, v, causal=causal, mask=mask, scale=scale).to(torch.float32 if q.dtype == torch.float32 else torch.bfloat16)
