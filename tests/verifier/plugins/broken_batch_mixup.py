"""BROKEN (batches mixed up): flattens (B, H) for K/V in the wrong order, so batch and head swap."""
import torch

from harness import register


@register("broken_batch_mixup", backend="torch")
def broken_batch_mixup(q, k, v, *, causal=False, mask=None, scale=None):
    b, h, t, d = q.shape
    qf = q.reshape(b * h, t, d)
    kf = k.transpose(0, 1).reshape(b * h, k.shape[2], d)  # BUG: (H, B) order for K and V
    vf = v.transpose(0, 1).reshape(b * h, k.shape[2], d)
    scale = d ** -0.5 if scale is None else scale
    return (torch.softmax((qf @ kf.transpose(-1, -2)) * scale, -1) @ vf).reshape(b, h, t, d)
