"""BROKEN (tiled kernel drops the last partial block): keys past the last full block are ignored."""
import torch

from harness import register


@register("broken_tiled_drops_last_block", backend="torch")
def broken_tiled_drops_last_block(q, k, v, *, causal=False, mask=None, scale=None, block=16):
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    tk = k.shape[2]
    m = torch.full(q.shape[:-1] + (1,), float("-inf"), dtype=q.dtype)
    l = torch.zeros_like(m)
    acc = torch.zeros_like(q)
    for k0 in range(0, max(tk - tk % block, block), block):  # BUG: the partial tail block is skipped
        s = (q @ k[:, :, k0:k0 + block].transpose(-1, -2)) * scale
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        p = torch.exp(s - m_new)
        c = torch.exp(m - m_new)
        l = l * c + p.sum(-1, keepdim=True)
        acc = acc * c + p @ v[:, :, k0:k0 + block]
        m = m_new
    return acc / l
