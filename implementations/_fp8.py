"""Reading an FP8 KV cache in the built-in implementations: K and V dequantized before they are attended.

An FP8 cache arrives as K and V stored in float8_e4m3fn or float8_e5m2 with float32 scales (``k_scale=``,
``v_scale=``; docs/decode.md): one for the whole tensor, shape (1,); one per kv head, (Hkv,); or one per cached row,
K's shape without its head dim (a contiguous cache's (B, Hkv, Tk), page pools' (num_pages, Hkv, page_size)). The
value a row stands for is ``stored * scale``. Written here, apart from the harness's own quantisation, so that an
implementation and the oracle it is checked against never share a reading of the contract.
"""

from __future__ import annotations

import torch


def dequantized(x: torch.Tensor, scale: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor:
    """``x`` (a cache (B, Hkv, T, d) or page pools (P, Hkv, page, d)) times its ``scale``, in ``dtype``; the product
    is formed in float32 (float64 for a float64 ``dtype``) and rounded once. ``scale`` None: ``x`` in ``dtype``."""
    if scale is None:
        return x if x.dtype == dtype else x.to(dtype)
    wide = torch.float64 if dtype == torch.float64 else torch.float32
    s = scale.to(wide)
    s = s.reshape(1, -1, 1, 1) if s.dim() == 1 else s.unsqueeze(-1)  # (1,) and (Hkv,) by head; a row's own
    return (x.to(wide) * s).to(dtype)
