"""BROKEN (precision): computes in float16 inside a float32 implementation; plausible-looking, 1e-3 off."""
import torch

from harness import register


@register("broken_half_accumulate", backend="torch")
def broken_half_accumulate(q, k, v, *, causal=False, mask=None, scale=None):
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    qh, kh, vh = (x.half() for x in (q, k, v))  # BUG: silent downcast
    s = ((qh @ kh.transpose(-1, -2)) * scale).float()
    return (torch.softmax(s, -1).half() @ vh).to(q.dtype)
