"""A worker that describes its shared inputs wrongly: the parent's values would miss what the call reads."""

import torch.nn.functional as F

import harness.bench.driven as driven
from harness import register


def _attend(q, k, v, scale):
    return F.scaled_dot_product_attention(q, k, v, scale=scale)


# --- a layout that points the parent's writes away from what the call reads

_describe = driven._describe


def _shifted(x):
    described = _describe(x)
    if described["kind"] == "torch" and x.dim() == 4:
        described["shape"] = [described["shape"][0], described["shape"][1], described["shape"][2] - 1,
                              described["shape"][3]]
    return described


driven._describe = _shifted  # at import: before the worker describes its shared inputs


@register("rt_lying_layout", backend="torch",
          description="describes its shared inputs one row short, so the parent's values miss the last row")
def rt_lying_layout(q, k, v, *, causal=False, mask=None, scale=None):
    return _attend(q, k, v, scale)
