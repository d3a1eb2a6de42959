"""CORRECT but unusual: returns a non-contiguous view, (B, Tq, H, d) storage transposed to (B, H, Tq, d)."""
import torch

from harness import register


@register("unusual_strided_output", backend="torch", dtypes=("float32", "float64"), causal=True, gqa=True)
def unusual_strided_output(q, k, v, *, causal=False, mask=None, scale=None):
    b, h, tq, d = q.shape
    out = torch.empty(b, tq, h, d, dtype=q.dtype)
    g = h // k.shape[1]
    scale = d ** -0.5 if scale is None else scale
    for head in range(h):
        s = (q[:, head] @ k[:, head // g].transpose(-1, -2)) * scale
        if causal:
            s = s.masked_fill(~torch.ones(tq, k.shape[2], dtype=torch.bool).tril(), float("-inf"))
        out[:, :, head] = torch.softmax(s, -1) @ v[:, head // g]
    return out.transpose(1, 2)
