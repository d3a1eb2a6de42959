"""CORRECT but unusual: the log-sum-exp form, weights = exp(s - logsumexp(s)), no division."""
import torch

from harness import register


@register("unusual_logsumexp", backend="torch", dtypes=("float32", "float64"), causal=True, mask=True, grad=True)
def unusual_logsumexp(q, k, v, *, causal=False, mask=None, scale=None):
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    s = (q @ k.transpose(-1, -2)) * scale
    allowed = torch.ones(s.shape[-2:], dtype=torch.bool).tril() if causal else None
    if mask is not None:
        allowed = mask if allowed is None else allowed & mask
    if allowed is not None:
        s = s.masked_fill(~allowed, float("-inf"))
    lse = torch.logsumexp(s, -1, keepdim=True)
    w = torch.exp(s - torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse)))  # empty row: exp(-inf) = 0
    return w @ v
