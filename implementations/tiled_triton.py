"""FlashAttention-2 as Triton kernels (forward and backward): attnbench's tiled kernel for GPUs.

On a CUDA device the kernels are compiled by Triton. On a CPU machine they run only under
Triton's interpreter (``TRITON_INTERPRET=1`` set before attnbench starts, because Triton
reads it when the kernels are defined), which executes the same kernel code with NumPy:
slow, but it checks the kernel logic on small shapes without a GPU. The kernels are in
:mod:`implementations._flash_triton`, imported on first use.
"""

from __future__ import annotations

import importlib.util
import math
import os
from typing import TYPE_CHECKING, Any

import torch

from harness import register

if TYPE_CHECKING:
    from harness.case.attention import AttentionCase

BLOCKS = (16, 32, 64, 128)
"""``tl.dot`` needs at least 16 rows and columns; powers of two."""


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")


def available(case: AttentionCase) -> str | None:
    """None when the kernels can run the case here, else exactly why not."""
    if importlib.util.find_spec("triton") is None:
        return "the triton package is not installed (pip install 'attnbench[triton]')"
    if case.device == "cpu" and not _interpreting():
        return ("Triton compiles for GPUs; on the CPU it runs only under its interpreter: start attnbench "
                f"with TRITON_INTERPRET=1 (it is {os.environ.get('TRITON_INTERPRET', 'unset')!r} here)")
    if case.device == "cpu" and case.dtype == "bfloat16":
        return "Triton's interpreter runs kernels with NumPy, which has no bfloat16; bfloat16 runs on CUDA only"
    if case.device == "cuda" and _interpreting():
        return "TRITON_INTERPRET=1 is set, so Triton would interpret rather than compile for the GPU; unset it"
    return None


def _grid_launch(kernel: Any, grid: tuple[int, int], *args: Any, **meta: Any) -> None:
    """The one place the kernels are launched (the same call on CUDA and under the interpreter)."""
    kernel[grid](*args, **meta)


class _TritonFlash(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, mask, causal, scale, block_q, block_k):  # type: ignore[override]
        from implementations import _flash_triton as kernels

        b, h, tq, d = q.shape
        tk, group = k.shape[2], h // k.shape[1]
        scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
        out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
        lse = torch.empty(b, h, tq, dtype=torch.float32, device=q.device)
        m = _mask_view(mask, q, tk)
        meta = {"CAUSAL": causal, "HAS_MASK": mask is not None, "PRECISION": _precision(q),
                "BLOCK_M": block_q, "BLOCK_N": block_k, "BLOCK_D": max(16, _next_pow2(d))}
        _grid_launch(kernels.fwd_kernel, (math.ceil(tq / block_q), b * h), q, k, v, out, lse, m,
                     *q.stride(), *k.stride(), *v.stride(), *out.stride(), *m.stride(),
                     h, group, tq, tk, d, scale / math.log(2.0), **meta)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.args = (mask, causal, scale, meta)
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, dout, _dlse):  # type: ignore[override]
        from implementations import _flash_triton as kernels

        q, k, v, out, lse = ctx.saved_tensors
        mask, _causal, scale, meta = ctx.args  # causal travels in meta
        b, h, tq, d = q.shape
        hkv, tk = k.shape[1], k.shape[2]
        delta = (dout.float() * out.float()).sum(-1).contiguous()           # D_i = rowsum(dO * O)
        lse2 = torch.where(lse == -math.inf, math.inf, lse / math.log(2.0)).contiguous()
        dq = torch.empty(b, h, tq, d, dtype=torch.float32, device=q.device)
        dk = torch.empty(b, h, tk, d, dtype=torch.float32, device=q.device)  # per query head
        dv = torch.empty_like(dk)
        m = _mask_view(mask, q, tk)
        args = (q, k, v, dout, lse2, delta, m, dq, dk, dv, *q.stride(), *k.stride(), *v.stride(),
                *dout.stride(), *m.stride(), h, h // hkv, tq, tk, d, scale / math.log(2.0), scale)
        _grid_launch(kernels.bwd_kernel, (math.ceil(tk / meta["BLOCK_N"]), b * h), *args, FOR_DQ=False, **meta)
        _grid_launch(kernels.bwd_kernel, (math.ceil(tq / meta["BLOCK_M"]), b * h), *args, FOR_DQ=True, **meta)
        dk = dk.view(b, hkv, h // hkv, tk, d).sum(2)  # GQA: a kv head's gradient sums its query heads
        dv = dv.view(b, hkv, h // hkv, tk, d).sum(2)
        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), None, None, None, None, None


def _next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def _precision(q: torch.Tensor) -> str:
    """float32 dots in full IEEE precision (Triton's default on GPUs would be TF32)."""
    return "ieee" if q.dtype == torch.float32 else "tf32"


def _mask_view(mask: torch.Tensor | None, q: torch.Tensor, tk: int) -> torch.Tensor:
    """The mask as a uint8 (B, H, Tq, Tk) view (zero strides where it broadcasts), or a dummy."""
    if mask is None:
        return torch.zeros(1, 1, 1, 1, dtype=torch.uint8, device=q.device)
    mask = mask.to(device=q.device, dtype=torch.bool)
    return mask.view(torch.uint8).expand(q.shape[0], q.shape[1], q.shape[2], tk)


@register("tiled_triton", backend="torch", memory="linear", dtypes=("float32", "float16", "bfloat16"), devices=("cpu", "cuda"),
          causal=True, mask=True, gqa=True, grad=True, available=available,
          block_q=BLOCKS, block_k=BLOCKS,
          description="FlashAttention-2 Triton kernels, forward and backward (CPU: only under TRITON_INTERPRET=1)")
def tiled_triton(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
                 mask: torch.Tensor | None = None, scale: float | None = None,
                 block_q: int = 64, block_k: int = 64) -> torch.Tensor:
    for name, size in (("block_q", block_q), ("block_k", block_k)):
        if size < 16 or size & (size - 1):
            from harness.errors import UsageError

            raise UsageError(f"tiled_triton: {name}={size}; Triton tiles need a power of two >= 16, e.g. 64")
    return _TritonFlash.apply(q, k, v, mask, causal, scale, block_q, block_k)[0]
