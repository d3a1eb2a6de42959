"""BROKEN (layout of the upstream gradient): a hand-written backward that reads dO's memory as if it were
contiguous. Right whenever autograd hands it a contiguous gradient (as a loss usually does); wrong for a
transposed or strided dO (a gradient flowing back through a transpose or a slice)."""
import torch

from harness import register


class _Attention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, scale):
        p = torch.softmax(q @ k.transpose(-1, -2) * scale, -1)
        ctx.save_for_backward(q, k, v, p)
        ctx.scale = scale
        return p @ v

    @staticmethod
    def backward(ctx, dout):
        q, k, v, p = ctx.saved_tensors
        if not dout.is_contiguous():
            raw = torch.empty(0, dtype=dout.dtype)
            dout = raw.set_(dout.untyped_storage(), dout.storage_offset(), dout.shape)  # BUG: strides ignored
        dv = p.transpose(-1, -2) @ dout
        dp = dout @ v.transpose(-1, -2)
        ds = p * (dp - (dp * p).sum(-1, keepdim=True))
        return ds @ k * ctx.scale, ds.transpose(-1, -2) @ q * ctx.scale, dv, None


@register("broken_upstream_grad_contiguous", backend="torch", grad=True)
def broken_upstream_grad_contiguous(q, k, v, *, causal=False, mask=None, scale=None):
    return _Attention.apply(q, k, v, q.shape[-1] ** -0.5 if scale is None else scale)
