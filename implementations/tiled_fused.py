"""FlashAttention-2 forward and backward as a compiled C++ extension (``tiled`` is the readable version).

Kernels come in ISA tiers chosen at run time (:data:`TIERS`; docs/isa_tiers.md; ``ATTNBENCH_FUSED_ISA``
or ``isa=`` caps the tier, :func:`tier` names the one a dtype runs on):
amx_bf16: the bf16 forward's and backward's tile GEMMs on oneDNN's brgemm micro-kernel (AMX tiles), where
oneDNN runs bf16 on them; softmax and sums as avx512_bf16's.
avx512_bf16: bf16 on VDPBF16PS with float32 accumulation (:file:`_flash_bf16.cpp`), softmax and sums
in float32, the output rounded once; backward on the bf16 units (:file:`_flash_bf16_backward.cpp`).
avx512f: float32 with K^T and V packed once per key block and an 8 x 32 register kernel of its own
(:file:`_flash_f32.cpp`: MKL packs its operands on every call); bf16 without the bf16 units as float32.
avx2 (AVX2 + FMA): the same design on 8 lanes, a 6 x 16 kernel (:file:`_flash_avx2.cpp`), float32 or
bf16 converted to float32 as it loads; its backward (:file:`_flash_avx2_backward.cpp`, five GEMMs of
its own) also serves the avx512f tier, where it beat MKL's.
generic: MKL's tile GEMMs through ATen, one softmax loop per row (:file:`_flash_fused.cpp`,
:file:`_flash_backward.cpp`); float64 and float16 always (no fp16 dot product on this CPU family).
Blocks crossing the causal diagonal are multiplied in 64-row chunks, and no torch operation runs just
before the workers (it would leave OpenMP threads spinning on the cores they need). Backward:
FlashAttention-2's dQ, dK, dV recomputed from the saved log-sum-exp; work items are key blocks of one
kv head (dK, dV private, GQA without copies, causal blocks skipped), dQ in one float32 buffer per
worker, summed at the end. float64 keeps ``tiled``'s torch-ops backward.
Structures (windows, bottom-right causal, packed sequences) are native: each row's allowed keys are one
range, and no key block outside it is computed (:mod:`implementations._fused_kernels`). The forward and the
backward work item are each written once (:file:`kernels/_flash_forward.h`, :file:`kernels/_flash_backward.h`),
templates over the kernel traits each tier's file defines (docs/kernels.md).

Built on first use, never at import (:mod:`implementations._cpp_build`): discovery works without a
compiler, and a failed build becomes this plugin's availability reason. Each tier above avx2 is an
extension of its own, compiled whole for its instruction set and loaded only on a CPU that has it
(:data:`implementations._cpp_build.ISAS`): a compiler that cannot build AVX512_BF16 code loses only
those kernels (bf16 takes the float32 ones; :func:`bf16_reason` and :func:`f32_reason` say why), not the
plugin.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from harness import register
from harness.errors import UsageError
from implementations._cpp_build import build
from implementations._flash_cpu import _Plan, backward, pick_blocks
from implementations._fused_kernels import (
    _BUILD,
    FORCE_ISA,
    TIERS,
    Sequence,
    available,
    avx512_extension,
    bf16_extension,
    bf16_kernel,
    bf16_reason,
    extension,
    f32_reason,
    f32_tier,
    sequences,
    tier,
)
from implementations._fused_kernels import backward as fused_backward
from implementations._fused_kernels import forward as fused_forward

__all__ = ["_BUILD", "FORCE_ISA", "TIERS", "available", "avx512_extension", "bf16_extension", "bf16_kernel",
           "bf16_reason", "build", "extension", "f32_reason", "f32_tier", "fused_flash_attention", "tier", "tiled_fused"]
BLOCKS = (16, 32, 64, 128, 256, 512, 1024)


def fused_blocks(tq: int, tk: int, d: int, own_gemm: bool = False, amx: bool = False) -> tuple[int, int]:
    """``tiled``'s per-shape blocks, with 512 query rows at d <= 64, and 512 x 512 up to d = 128 on the
    kernels with their own GEMMs (AVX-512 float32 and bf16: they work in 64-row chunks anyway, and a
    bigger block packs K and V for more rows). At B1-H8-T4096 (interleaved runs): d = 64, 512 x 512 was
    2-5% faster than 256 x 512; d = 128, bf16 4-6% faster than 256 x 512 and the AVX-512 float32
    kernel 3-6% faster than 256 x 256. On AMX (the amx_bf16 tier) 1,024 query rows where a head has two such
    blocks at least: K and V are packed once per query block, and at B1-H8-T4096 1,024 x 512 was 5-10% faster
    than 512 x 512 (d = 64 and 128, causal or not; 2,048 no faster)."""
    if amx and d <= 128 and tq >= 2048:
        return 1024, min(512, max(tk, 16))
    if own_gemm and d <= 128:
        return min(512, max(tq, 16)), min(512, max(tk, 16))
    block_q, block_k = pick_blocks(tq, tk, d)
    return (min(512, max(tq, 16)) if d <= 64 else block_q), block_k


def _ops_backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, lse: torch.Tensor,
                  dout: torch.Tensor, mask: torch.Tensor | None, causal: bool, scale: float, block_q: int,
                  block_k: int, structure: tuple[Any, str, list[Sequence]],
                  softcap: float | None = None) -> tuple[torch.Tensor, ...]:
    """``tiled``'s torch-ops backward, one packed sequence at a time: for float64, which it keeps, and for
    soft-capped logits in every dtype (the compiled backward kernels have no tanh chain factor)."""
    window, align, seqs = structure
    b, h, tq, d = q.shape
    full = None if mask is None else mask.expand(b, h, tq, k.shape[2])
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    for qs, qe, ks, ke, _ in seqs:
        if qe == qs or ke == ks:
            continue
        part = None if full is None else full[:, :, qs:qe, ks:ke]
        plan = _Plan(q[:, :, qs:qe], k[:, :, ks:ke], v[:, :, ks:ke], causal, part, scale, block_q, block_k, window, align,
                     softcap)
        n, g, rows = plan.n, plan.g, plan.tq  # tiled's layout: (B * Hkv, G, Tq, ...)
        got = backward(plan, out[:, :, qs:qe].reshape(n, g, rows, d), lse[:, :, qs:qe].reshape(n, g, rows),
                       dout[:, :, qs:qe])
        dq[:, :, qs:qe], dk[:, :, ks:ke], dv[:, :, ks:ke] = (x.view(y[:, :, a:e].shape) for x, y, a, e in zip(
            got, (q, k, v), (qs, ks, ks), (qe, ke, ke)))
    return dq, dk, dv


def _with_sinks(out: torch.Tensor, lse: torch.Tensor, sinks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Learned sinks (gpt-oss: one logit per query head that joins each row's denominator and adds nothing to the
    output), applied to the kernel's answer: the LSE becomes logaddexp(LSE, sink) and the output is scaled by
    exp(LSE - that). Exact, and the backward needs nothing else: recomputing P = exp(S - LSE) from the new LSE gives
    the sink-normalised weights, and rowsum(dO * O) over the scaled O is the sink-aware D. A row with no key keeps
    an output of 0."""
    total = torch.logaddexp(lse, sinks.to(lse.dtype).view(1, -1, 1))
    return out * torch.exp(lse - total).unsqueeze(-1), total


class FusedFlashAttention(torch.autograd.Function):
    """The fused forward; the compiled backward recomputes from the saved output and LSE."""

    @staticmethod
    def forward(ctx, q, k, v, sinks, mask, causal, scale, block_q, block_k, isa, structure,  # type: ignore[override]
                softcap=None):
        scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
        out, lse = fused_forward(q, k, v, mask, structure[2], scale, block_q, block_k, isa, softcap=softcap)
        if sinks is not None:
            out, lse = _with_sinks(out, lse, sinks)
        ctx.save_for_backward(q, k, v, out, lse, sinks)
        ctx.args = (mask, causal, scale, block_q, block_k, isa, structure, softcap)
        ctx.mark_non_differentiable(lse)
        return out.to(q.dtype), lse

    @staticmethod
    def backward(ctx, dout, _dlse):  # type: ignore[override]
        q, k, v, out, lse, sinks = ctx.saved_tensors
        mask, causal, scale, block_q, block_k, isa, structure, softcap = ctx.args
        if q.dtype == torch.float64 or softcap is not None:
            dq, dk, dv = _ops_backward(q, k, v, out, lse, dout, mask, causal, scale, block_q, block_k, structure, softcap)
        else:
            dq, dk, dv = fused_backward(q, k, v, out, lse, dout, mask, structure[2], scale, block_q, block_k, isa)
        dsinks = None
        if sinks is not None and ctx.needs_input_grad[3]:  # d sink = -sum over rows of p_sink * rowsum(dO * O)
            weight = torch.exp(sinks.to(lse.dtype).view(1, -1, 1) - lse)
            dsinks = -(weight * (dout.to(out.dtype) * out).sum(-1)).sum((0, 2)).to(sinks.dtype)
        return (dq.view(q.shape).to(q.dtype), dk.view(k.shape).to(k.dtype), dv.view(v.shape).to(v.dtype),
                dsinks, None, None, None, None, None, None, None, None)


def fused_flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
                          mask: torch.Tensor | None = None, scale: float | None = None,
                          block_q: int | None = None, block_k: int | None = None, isa: str | None = None,
                          window: tuple[int, int] | None = None, causal_align: str = "top_left",
                          cu_seqlens_q: Any = None, cu_seqlens_k: Any = None,
                          sinks: torch.Tensor | None = None, softcap: float | None = None,
                          ) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention output (B, H, Tq, d) in q's dtype and the natural-log LSE (B, H, Tq); ``isa``
    caps the kernels' tier (one of :data:`TIERS`; see :func:`tier`). ``window``, ``causal_align``,
    packed sequences (``cu_seqlens_*``, batch 1) and learned ``sinks`` (H,) as in the contract
    (docs/structures.md); with sinks the LSE counts them. ``softcap``: the scaled logits become
    ``softcap * tanh(logit / softcap)`` before any mask, in the compiled forward of every tier; the backward
    of soft-capped logits is ``tiled``'s torch-ops one."""
    for name, size in (("block_q", block_q), ("block_k", block_k)):
        if size is not None and (not isinstance(size, int) or size < 1):
            raise UsageError(f"tiled_fused: {name}={size!r}; block sizes are positive integers, e.g. 256")
    if causal_align not in ("top_left", "bottom_right"):
        raise UsageError(f"tiled_fused: causal_align={causal_align!r}; choose 'top_left' or 'bottom_right'")
    cu_q, cu_k = (None if c is None else [int(x) for x in c] for c in (cu_seqlens_q, cu_seqlens_k))
    seqs = sequences(q.shape[2], k.shape[2], causal, window, causal_align, cu_q, cu_k)
    level = tier(q.dtype, isa)
    auto_q, auto_k = fused_blocks(q.shape[2], k.shape[2], q.shape[3], level != "generic", level == "amx_bf16")
    return FusedFlashAttention.apply(q, k, v, sinks, mask, causal, scale, block_q or auto_q, block_k or auto_k, isa,
                                     (window, causal_align, seqs), softcap)


@register("tiled_fused", backend="torch", memory="linear", dtypes=("float32", "float64", "bfloat16", "float16"),
          causal=True, mask=True, gqa=True, grad=True, sinks=True, softcap=True, available=available,
          structures=("window", "bottom_right", "varlen"), block_q=BLOCKS, block_k=BLOCKS,
          description="FlashAttention-2 compiled: fused softmax, AVX-512 float32 and AVX512_BF16 tile GEMMs, compiled backward")
def tiled_fused(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
                mask: torch.Tensor | None = None, scale: float | None = None,
                block_q: int | None = None, block_k: int | None = None, window: tuple[int, int] | None = None,
                causal_align: str = "top_left", cu_seqlens_q: torch.Tensor | None = None,
                cu_seqlens_k: torch.Tensor | None = None, sinks: torch.Tensor | None = None,
                softcap: float | None = None) -> torch.Tensor:
    """Blocks default to :func:`fused_blocks` for the shape; any positive sizes give the same result.
    Windows, bottom-right alignment and packed sequences are native: key blocks outside them are skipped.
    Learned sinks rescale the kernel's output by its LSE (:func:`_with_sinks`); soft-capping is in the kernels."""
    return fused_flash_attention(q, k, v, causal=causal, mask=mask, scale=scale, block_q=block_q, block_k=block_k,
                                 window=window, causal_align=causal_align, cu_seqlens_q=cu_seqlens_q,
                                 cu_seqlens_k=cu_seqlens_k, sinks=sinks, softcap=softcap)[0]
