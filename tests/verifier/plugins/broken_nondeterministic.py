"""BROKEN (undeclared nondeterminism): sums in a random order each call; passes the rule, never the same bits."""
import sys
from pathlib import Path

import torch

from harness import register

sys.path.insert(0, str(Path(__file__).parent))
from _reference import masked_scores, repeat_kv


@register("broken_nondeterministic", backend="torch", causal=True, gqa=True)
def broken_nondeterministic(q, k, v, *, causal=False, mask=None, scale=None):
    k, v = repeat_kv(q, k, v)
    p = torch.softmax(masked_scores(q, k, causal=causal, scale=scale), -1)
    order = torch.randperm(k.shape[-2])  # BUG: a different summation order every call, not declared
    return p[..., order] @ v[..., order, :]
