"""BROKEN: for bfloat16 inputs the softmax denominator is accumulated in bfloat16, 16 keys at a time (the
accumulator of P V stays float32). Over a few hundred keys the error is within bfloat16 rounding; over thousands
the running sum stops growing (an increment below half an ulp of the total is lost)."""
import sys
from pathlib import Path

import torch

from harness import register

sys.path.insert(0, str(Path(__file__).parent))
from _core_model import allowed_keys, online


@register("broken_model_bf16_denominator", backend="torch", dtypes=("float32", "bfloat16"), causal=True, mask=True,
          gqa=True)
def broken_model_bf16_denominator(q, k, v, *, causal=False, mask=None, scale=None):
    allowed = allowed_keys(q.shape[2], k.shape[2], batch=q.shape[0], causal=causal, mask=mask)
    sums = torch.bfloat16 if q.dtype == torch.bfloat16 else None  # BUG for bfloat16
    return online(q, k, v, allowed, scale, block=16, sum_dtype=sums)
