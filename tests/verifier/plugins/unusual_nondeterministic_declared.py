"""UNUSUAL but correct: sums in a random order each call, and says so (deterministic=False)."""
import sys
from pathlib import Path

import torch

from harness import register

sys.path.insert(0, str(Path(__file__).parent))
from _reference import masked_scores, repeat_kv


@register("unusual_nondeterministic_declared", backend="torch", causal=True, gqa=True, deterministic=False)
def unusual_nondeterministic_declared(q, k, v, *, causal=False, mask=None, scale=None):
    k, v = repeat_kv(q, k, v)
    p = torch.softmax(masked_scores(q, k, causal=causal, scale=scale), -1)
    order = torch.randperm(k.shape[-2])  # a different summation order every call: declared above
    return p[..., order] @ v[..., order, :]
