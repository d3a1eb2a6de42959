"""attnbench's own FlashAttention-2 kernel for the CPU: tiled online softmax, O(T) memory, autograd.

For each block of queries, walk the blocks of keys keeping a running row max ``m``, a running
sum ``l`` and an accumulator rescaled by ``2^(m_old - m_new)`` whenever the max grows; divide
by ``l`` at the end and keep ``m + log l`` (the log-sum-exp) for the backward pass, which
recomputes each probability tile instead of storing the T x T matrix (FlashAttention-2).
The kernel itself, and why it is written with torch operations on tiles, is in
:mod:`implementations._flash_cpu`.
"""

from __future__ import annotations

import torch

from harness import register
from implementations._flash_cpu import flash_attention

BLOCKS = (16, 32, 64, 128, 256, 512, 1024)


@register("tiled", backend="torch", memory="linear", dtypes=("float32", "float64", "bfloat16", "float16"),
          causal=True, mask=True, gqa=True, grad=True, structures=("window", "bottom_right"),
          options={"block_q": BLOCKS, "block_k": BLOCKS},
          description="attnbench's FlashAttention-2 kernel on CPU tiles (online softmax, O(T) memory, backward)")
def tiled(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
          mask: torch.Tensor | None = None, scale: float | None = None,
          block_q: int | None = None, block_k: int | None = None, window: tuple[int, int] | None = None,
          causal_align: str = "top_left") -> torch.Tensor:
    """Blocks default to the per-shape choice of ``pick_blocks``; any positive sizes give the same result.
    Sliding windows and bottom-right alignment are native: blocks outside them are skipped."""
    return flash_attention(q, k, v, causal=causal, mask=mask, scale=scale, block_q=block_q, block_k=block_k,
                           window=window, causal_align=causal_align)[0]
