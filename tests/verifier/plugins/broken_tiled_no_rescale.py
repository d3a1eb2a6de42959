"""BROKEN (tiled kernel without the rescale): the accumulator is not multiplied by exp(m_old - m_new)."""
import torch

from harness import register


@register("broken_tiled_no_rescale", backend="torch")
def broken_tiled_no_rescale(q, k, v, *, causal=False, mask=None, scale=None, block=16):
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    tk = k.shape[2]
    m = torch.full(q.shape[:-1] + (1,), float("-inf"), dtype=q.dtype)
    l = torch.zeros_like(m)
    acc = torch.zeros_like(q)
    for k0 in range(0, tk, block):
        s = (q @ k[:, :, k0:k0 + block].transpose(-1, -2)) * scale
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        p = torch.exp(s - m_new)
        l = l * torch.exp(m - m_new) + p.sum(-1, keepdim=True)
        acc = acc + p @ v[:, :, k0:k0 + block]  # BUG: acc not rescaled by exp(m - m_new)
        m = m_new
    return acc / l
