"""attnbench's own FlashAttention-2-style kernel: blocked online softmax, never materialising T x T.

For each block of queries, walk the blocks of keys keeping a running row max ``m``, a
running sum ``l`` and an accumulator rescaled by ``exp(m_old - m_new)`` whenever the max
grows; divide by ``l`` at the end. Peak extra memory is a few (block_q x block_k) tiles.
"""

from __future__ import annotations

import torch

from harness import register


def tiled_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
                    mask: torch.Tensor | None = None, scale: float | None = None,
                    block_q: int = 128, block_k: int = 128) -> torch.Tensor:
    b, h, tq, d = q.shape
    hkv, tk = k.shape[1], k.shape[2]
    group = h // hkv
    acc_dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = 1.0 / float(d) ** 0.5 if scale is None else float(scale)
    out = torch.empty(b, h, tq, d, dtype=q.dtype, device=q.device)
    if mask is not None:
        mask = mask.expand(b, h, tq, tk)
    qg = q.reshape(b, hkv, group, tq, d)  # query heads of one kv head side by side: GQA without copies
    og = out.view(b, hkv, group, tq, d)
    for q0 in range(0, tq, block_q):
        q1 = min(q0 + block_q, tq)
        qi = qg[:, :, :, q0:q1].to(acc_dtype) * scale
        acc = torch.zeros(b, hkv, group, q1 - q0, d, dtype=acc_dtype, device=q.device)
        row_max = torch.full((b, hkv, group, q1 - q0, 1), float("-inf"), dtype=acc_dtype, device=q.device)
        row_sum = torch.zeros_like(row_max)
        k_end = min(tk, q1) if causal else tk
        for k0 in range(0, k_end, block_k):
            k1 = min(k0 + block_k, k_end)
            kj = k[:, :, None, k0:k1].to(acc_dtype)
            vj = v[:, :, None, k0:k1].to(acc_dtype)
            s = torch.matmul(qi, kj.transpose(-1, -2))
            allowed = None
            if causal and k1 > q0:
                allowed = torch.arange(q0, q1, device=q.device)[:, None] >= torch.arange(k0, k1, device=q.device)
            if mask is not None:
                tile = mask[:, :, q0:q1, k0:k1].reshape(b, hkv, group, q1 - q0, k1 - k0)
                allowed = tile if allowed is None else (tile & allowed)
            if allowed is not None:
                s = s.masked_fill(~allowed, float("-inf"))
            new_max = torch.maximum(row_max, s.amax(-1, keepdim=True))
            safe_max = torch.where(torch.isfinite(new_max), new_max, torch.zeros_like(new_max))
            p = torch.exp(s - safe_max)
            correction = torch.exp(row_max - safe_max)
            row_sum = row_sum * correction + p.sum(-1, keepdim=True)
            acc = acc * correction + torch.matmul(p, vj)
            row_max = new_max
        result = acc / torch.where(row_sum > 0, row_sum, torch.ones_like(row_sum))
        og[:, :, :, q0:q1] = result.to(q.dtype)
    return out


@register("tiled", backend="torch", dtypes=("float32", "float64", "bfloat16", "float16"),
          causal=True, mask=True, gqa=True,
          description="attnbench's tiled FlashAttention-style kernel (online softmax, O(T) memory)")
def tiled(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
          mask: torch.Tensor | None = None, scale: float | None = None) -> torch.Tensor:
    return tiled_attention(q, k, v, causal=causal, mask=mask, scale=scale)
