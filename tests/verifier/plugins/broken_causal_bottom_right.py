"""BROKEN (causal alignment): bottom-right causal (query i sees keys j <= i + Tk - Tq), the contract is top-left."""
import torch

from harness import register


@register("broken_causal_bottom_right", backend="torch", causal=True, mask=True, gqa=True)
def broken_causal_bottom_right(q, k, v, *, causal=False, mask=None, scale=None):
    tq, tk = q.shape[-2], k.shape[-2]
    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    s = (q @ k.transpose(-1, -2)) * scale
    allowed = torch.ones(tq, tk, dtype=torch.bool).tril(diagonal=tk - tq) if causal else None  # BUG: offset
    if mask is not None:
        allowed = mask if allowed is None else allowed & mask
    if allowed is None:
        return torch.softmax(s, -1) @ v
    allowed = allowed.expand(s.shape)
    p = torch.softmax(s.masked_fill(~allowed, float("-inf")), -1)
    return (p @ v).masked_fill(~allowed.any(-1, keepdim=True), 0.0)
