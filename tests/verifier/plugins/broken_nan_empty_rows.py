"""BROKEN (NaN on rows with no allowed key): a plain softmax over a row of -inf gives NaN, not zeros."""
import torch

from harness import register


@register("broken_nan_empty_rows", backend="torch", causal=True, mask=True)
def broken_nan_empty_rows(q, k, v, *, causal=False, mask=None, scale=None):
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    s = (q @ k.transpose(-1, -2)) * scale
    allowed = torch.ones(s.shape[-2:], dtype=torch.bool).tril() if causal else None
    if mask is not None:
        allowed = mask if allowed is None else allowed & mask
    if allowed is not None:
        s = s.masked_fill(~allowed, float("-inf"))
    return torch.softmax(s, -1) @ v  # BUG: no zeroing of empty rows
