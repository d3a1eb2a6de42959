"""attnbench's own FlashAttention-2 kernel for the CPU: tiled online softmax, O(T) memory, autograd.

For each block of queries, walk the blocks of keys keeping a running row max ``m``, a running
sum ``l`` and an accumulator rescaled by ``2^(m_old - m_new)`` whenever the max grows; divide
by ``l`` at the end and keep ``m + log l`` (the log-sum-exp) for the backward pass, which
recomputes each probability tile instead of storing the T x T matrix (FlashAttention-2).
The kernel itself, and why it is written with torch operations on tiles, is in
:mod:`implementations._flash_cpu`.
"""

from __future__ import annotations

from typing import Any

import torch

from harness import register
from implementations._flash_cpu import flash_attention

BLOCKS = (16, 32, 64, 128, 256, 512, 1024)


@register("tiled", backend="torch", memory="linear", dtypes=("float32", "float64", "bfloat16", "float16"),
          causal=True, mask=True, gqa=True, grad=True, softcap=True, structures=("window", "bottom_right", "varlen"),
          block_q=BLOCKS, block_k=BLOCKS,
          description="attnbench's FlashAttention-2 kernel on CPU tiles (online softmax, O(T) memory, backward)")
def tiled(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
          mask: torch.Tensor | None = None, scale: float | None = None,
          block_q: int | None = None, block_k: int | None = None, window: tuple[int, int] | None = None,
          causal_align: str = "top_left", cu_seqlens_q: torch.Tensor | None = None,
          cu_seqlens_k: torch.Tensor | None = None, softcap: float | None = None) -> torch.Tensor:
    """Blocks default to the per-shape choice of ``pick_blocks``; any positive sizes give the same result.
    Sliding windows and bottom-right alignment are native: blocks outside them are skipped. Packed
    sequences (``cu_seqlens_*``) run one kernel call per sequence: no block across two is visited. Soft-capping
    is applied to each score tile before its mask, and its chain factor to each tile of dS."""
    kw: dict[str, Any] = {"causal": causal, "scale": scale, "block_q": block_q, "block_k": block_k, "window": window,
          "causal_align": causal_align, "softcap": softcap}
    if cu_seqlens_q is None or cu_seqlens_k is None:
        return flash_attention(q, k, v, mask=mask, **kw)[0]
    b, h, tq, d = q.shape
    full = None if mask is None else torch.broadcast_to(mask, (b, h, tq, k.shape[2]))  # a view
    parts = []
    starts = zip(cu_seqlens_q.tolist(), cu_seqlens_q.tolist()[1:], cu_seqlens_k.tolist(), cu_seqlens_k.tolist()[1:])
    for q0, q1, k0, k1 in starts:
        if q1 == q0:
            continue
        if k1 == k0:  # a sequence with no key: its queries attend nothing
            parts.append(torch.zeros(b, h, q1 - q0, d, dtype=q.dtype, device=q.device))
            continue
        part_mask = None if full is None else full[:, :, q0:q1, k0:k1]
        parts.append(flash_attention(q[:, :, q0:q1], k[:, :, k0:k1], v[:, :, k0:k1], mask=part_mask, **kw)[0])
    return torch.cat(parts, dim=2)
