"""BROKEN (backward with the default scale): forward honours scale=, the gradient uses 1/sqrt(d)."""
import sys
from pathlib import Path

from harness import register

sys.path.insert(0, str(Path(__file__).parent))
from _reference import attend


@register("broken_grad_default_scale", backend="torch", causal=True, mask=True, gqa=True, grad=True)
def broken_grad_default_scale(q, k, v, *, causal=False, mask=None, scale=None):
    right = attend(q, k, v, causal=causal, mask=mask, scale=scale)
    if scale is None:
        return right
    default = attend(q, k, v, causal=causal, mask=mask)
    return right.detach() + (default - default.detach())  # BUG: value of one, gradient of the other
