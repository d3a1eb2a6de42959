"""CORRECT but unusual: a FlashAttention-style backward. The forward saves only the output and the row
log-sum-exp; the backward recomputes P = exp(S - lse) from them (no saved P, no softmax autograd), then
dV = P^T dO, dS = P * (dO V^T - rowsum(dO * O)), dQ = scale dS K, dK = scale dS^T Q, all in the input dtype.
With large logits the recomputed P carries the rounding of lse (relative eps * |logit|) into every gradient."""
import torch

from harness import register


def _allowed(q, k, causal, mask):
    allowed = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device)
    if causal:
        allowed = allowed.tril()
    if mask is not None:
        allowed = allowed & mask
    return allowed.expand(q.shape[0], q.shape[1], q.shape[-2], k.shape[-2])


class _LSEAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, allowed, scale):
        s = (q @ k.transpose(-1, -2) * scale).masked_fill(~allowed, float("-inf"))
        lse = torch.logsumexp(s, -1, keepdim=True)
        lse = torch.where(torch.isfinite(lse), lse, torch.full_like(lse, float("inf")))  # empty row: P = 0
        out = torch.exp(s - lse) @ v
        ctx.save_for_backward(q, k, v, allowed, out, lse)
        ctx.scale = scale
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, allowed, out, lse = ctx.saved_tensors
        s = (q @ k.transpose(-1, -2) * ctx.scale).masked_fill(~allowed, float("-inf"))
        p = torch.exp(s - lse)  # recomputed from the saved log-sum-exp
        dv = p.transpose(-1, -2) @ dout
        ds = p * (dout @ v.transpose(-1, -2) - (dout * out).sum(-1, keepdim=True))
        return ds @ k * ctx.scale, ds.transpose(-1, -2) @ q * ctx.scale, dv, None, None


@register("unusual_lse_backward", backend="torch", dtypes=("float32", "float64"), causal=True, mask=True, gqa=True,
          grad=True)
def unusual_lse_backward(q, k, v, *, causal=False, mask=None, scale=None):
    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    return _LSEAttention.apply(q, k, v, _allowed(q, k, causal, mask), scale)
