"""BROKEN (backward without the mask): the forward is right; gradients flow as if nothing were masked."""
import sys
from pathlib import Path

from harness import register

sys.path.insert(0, str(Path(__file__).parent))
from _reference import attend


@register("broken_grad_ignores_mask", backend="torch", causal=True, mask=True, gqa=True, grad=True)
def broken_grad_ignores_mask(q, k, v, *, causal=False, mask=None, scale=None):
    right = attend(q, k, v, causal=causal, mask=mask, scale=scale)
    if mask is None:
        return right
    unmasked = attend(q, k, v, causal=causal, scale=scale)
    return right.detach() + (unmasked - unmasked.detach())  # BUG: value of one, gradient of the other
