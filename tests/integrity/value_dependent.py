"""A kernel whose time depends on its input values, on purpose: the value probe must say so.

``zero_shortcut`` computes attention honestly (every call's output matches float64), but when every query is
zero it knows the answer without the logits: each row is the mean of v over the keys, O(T d) instead of
O(T^2 d). On the normal draw it also does its dense work a few times over (the same result each time), so the
gap between the two paths is well over 20x on any machine and load: a fast path as real kernels have them.
"""

import torch

from harness import register

REPEATS = 4
"""Dense passes per call on ordinary values (one answer: the others make the dense path slower still)."""


@register("zero_shortcut", backend="torch", description="dense attention, but all-zero queries take an O(T d) shortcut")
def zero_shortcut(q, k, v, *, causal=False, mask=None, scale=None):
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    if not causal and mask is None and not bool(q.any()):
        return v.mean(dim=-2, keepdim=True).expand(*q.shape[:-1], v.shape[-1]).clone()
    out = None
    for _ in range(REPEATS):
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, scale=scale)
    return out
