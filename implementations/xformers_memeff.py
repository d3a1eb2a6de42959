"""``xformers.ops.memory_efficient_attention`` behind the attnbench contract.

xformers works in (B, T, H, d) ("BMHK"); GQA goes through its 5-D (B, T, G, H/G, d)
form with K and V expanded (a view, no copy) across the heads of a group; causal is
``LowerTriangularMask``; structures are xformers' own bias classes (:func:`structure_bias`:
BlockDiagonal* for packed sequences, *FromBottomRight* for bottom-right alignment, local
attention for windows) wherever one expresses the case; a boolean mask, or a structure no class
expresses, becomes an additive bias (0 / -inf), stored in a buffer whose last dimension is padded
to a multiple of 8 as xformers' CUDA kernels require. The translation (:func:`to_xformers`,
:func:`from_xformers`, in :mod:`implementations._xformers_layout`) is plain torch, so it is tested here
even though xformers has no CPU kernel.

Why it cannot run is xformers' own answer: the import error, the reason its C++/CUDA
extensions did not load, or its dispatcher's list of why each operator refused the input.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import torch

from harness import register
from implementations._xformers_layout import _import_fmha, additive_bias, from_xformers, structure_bias, to_xformers

if TYPE_CHECKING:
    from harness.case.attention import AttentionCase

__all__ = ["additive_bias", "from_xformers", "structure_bias", "to_xformers", "xformers_memeff"]


def _available(case: AttentionCase) -> str | None:
    return _dispatch_reason(case.device, case.dtype, case.heads, case.kv_heads, case.d, case.mask != "none",
                            case.causal, case.grad)


@functools.cache
def _dispatch_reason(device: str, dtype: str, heads: int, kv_heads: int, d: int, mask: bool, causal: bool,
                     grad: bool) -> str | None:
    """xformers' dispatcher asked about one kind of input (cached: it is slow and asked per case)."""
    fmha, reason = _import_fmha()
    if fmha is None:
        return reason
    device = device if device != "cuda" or torch.cuda.is_available() else "cpu"
    make = functools.partial(torch.zeros, dtype=getattr(torch, dtype), device=device)
    q = make(1, heads, 8, d)
    k = make(1, kv_heads, 8, d)
    bool_mask = torch.ones(1, 1, 8, 8, dtype=torch.bool, device=device) if mask else None
    qx, kx, vx, bias = to_xformers(q, k, k, causal=causal, mask=bool_mask)
    try:
        fmha._dispatch_fw(fmha.Inputs(qx, kx, vx, bias), grad)
    except NotImplementedError as exc:
        lines = [line.strip() for line in str(exc).splitlines()]
        why = [line for line in lines if line and not line.startswith(("query", "key", "value", "attn_bias", "p "))]
        dispatch = why[1].rstrip(":") + ": " + "; ".join(why[2:]) if len(why) > 2 else "; ".join(why)
        return f"xformers has no operator for this input: {dispatch}" + (f"; {reason}" if reason else "")
    return reason


@register("xformers_memeff", backend="torch", memory="linear", dtypes=("float32", "bfloat16", "float16"),
          devices=("cuda", "cpu"), causal=True, mask=True, gqa=True, grad=True, available=_available,
          structures=("window", "bottom_right", "varlen"),
          description="xformers.ops.memory_efficient_attention (CUDA kernels only)")
def xformers_memeff(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
                    mask: torch.Tensor | None = None, scale: float | None = None, window: tuple[int, int] | None = None,
                    causal_align: str = "top_left", cu_seqlens_q: torch.Tensor | None = None,
                    cu_seqlens_k: torch.Tensor | None = None) -> torch.Tensor:
    fmha, reason = _import_fmha()
    if fmha is None:
        raise RuntimeError(reason)
    varlen = None
    if cu_seqlens_q is not None and cu_seqlens_k is not None:
        cq, ck = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
        varlen = tuple((q1 - q0, k1 - k0) for q0, q1, k0, k1 in zip(cq, cq[1:], ck, ck[1:]))
    structure = {"window": window, "causal_align": causal_align, "varlen": varlen}
    qx, kx, vx, bias = to_xformers(q, k, v, causal=causal, mask=mask, **structure)
    out = fmha.memory_efficient_attention(qx, kx, vx, attn_bias=bias, scale=scale)
    return from_xformers(out, q, causal=causal, mask=mask, tk=k.shape[2], **structure)
