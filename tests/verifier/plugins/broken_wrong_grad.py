"""BROKEN (wrong gradient): a hand-written backward that forgets the scale in dq and dk."""
import torch

from harness import register


class _Attention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, scale):
        p = torch.softmax((q @ k.transpose(-1, -2)) * scale, -1)
        ctx.save_for_backward(q, k, v, p)
        return p @ v

    @staticmethod
    def backward(ctx, do):
        q, k, v, p = ctx.saved_tensors
        dv = p.transpose(-1, -2) @ do
        dp = do @ v.transpose(-1, -2)
        ds = p * (dp - (dp * p).sum(-1, keepdim=True))  # BUG: ds should be multiplied by the scale
        return ds @ k, ds.transpose(-1, -2) @ q, dv, None


@register("broken_wrong_grad", backend="torch", dtypes=("float32", "float64"), grad=True)
def broken_wrong_grad(q, k, v, *, causal=False, mask=None, scale=None):
    return _Attention.apply(q, k, v, q.shape[-1] ** -0.5 if scale is None else scale)
