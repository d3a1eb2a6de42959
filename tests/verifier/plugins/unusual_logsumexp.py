"""CORRECT but unusual: the log-sum-exp form, weights = exp(s - logsumexp(s)), no division."""
import sys
from pathlib import Path

import torch

from harness import register

sys.path.insert(0, str(Path(__file__).parent))
from _reference import masked_scores


@register("unusual_logsumexp", backend="torch", dtypes=("float32", "float64"), causal=True, mask=True, grad=True)
def unusual_logsumexp(q, k, v, *, causal=False, mask=None, scale=None):
    s = masked_scores(q, k, causal=causal, mask=mask, scale=scale)
    lse = torch.logsumexp(s, -1, keepdim=True)
    w = torch.exp(s - torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse)))  # empty row: exp(-inf) = 0
    return w @ v
