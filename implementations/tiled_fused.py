"""FlashAttention-2 forward and backward as a compiled C++ extension (``tiled`` is the readable version).

float32: the tile GEMMs go to MKL through ATen; each tile row's softmax (mask, max, exp2, sum,
rescale) is one C++ loop (:file:`_flash_fused.cpp`) instead of five torch passes; blocks crossing
the causal diagonal are multiplied in 64-row chunks; Q is scaled inside each work item (a torch op
just before the workers leaves OpenMP threads spinning on the cores they need).
bfloat16 on a CPU with AVX512_BF16 (checked at run time): both GEMMs on VDPBF16PS with float32
accumulation (:file:`_flash_bf16.cpp`), softmax and running sums in float32, the output rounded
once. Elsewhere, or with ``ATTNBENCH_FUSED_ISA=avx2``, bf16/fp16 go through the float32 path. float16:
this CPU family has no fp16 dot-product instruction (AVX512_FP16 is Intel's), so fp16 always does.
Backward (:file:`_flash_backward.cpp`, :file:`_flash_bf16_backward.cpp`): FlashAttention-2's dQ, dK,
dV recomputed from the saved log-sum-exp; work items are key blocks of one kv head (dK, dV private,
GQA without copies, causal blocks skipped), dQ in one float32 buffer per worker, summed at the end.
float64 keeps ``tiled``'s torch-ops backward.

Built on first use, never at import (:mod:`implementations._cpp_build`): discovery works without a
compiler, and a failed build becomes this plugin's availability reason.
"""

from __future__ import annotations

import math
import os
import sys
import threading
from pathlib import Path
from types import ModuleType

import torch

from harness import register
from harness.errors import UsageError
from implementations._cpp_build import build, built_before, extension_name, isa_flags
from implementations._flash_cpu import LOG2E, _Plan, backward, pick_blocks
from implementations._workers import run_parallel

BLOCKS = (16, 32, 64, 128, 256, 512, 1024)
SOURCES = [Path(__file__).with_name(name) for name in ("_flash_fused.cpp", "_flash_bf16.cpp", "_flash_backward.cpp",
                                                          "_flash_bf16_backward.cpp")]
FORCE_ISA = "ATTNBENCH_FUSED_ISA"
"""Environment variable: ``avx2`` makes bf16 take the float32 path (MKL GEMMs) even on an AVX512_BF16 CPU."""
_BUILD_LOCK = threading.Lock()
_BUILD: dict[str, ModuleType | str] = {}


def extension() -> ModuleType | str:
    """The compiled module, or the reason it could not be built (tried once per process)."""
    with _BUILD_LOCK:
        if "result" not in _BUILD:
            isa, flags = isa_flags()
            name = extension_name("attnbench_flash_fused", isa, SOURCES)
            if not built_before(name):  # a silent minute would look like a hang
                print("attnbench: building tiled_fused's C++ kernels (first use only, about a minute)", file=sys.stderr)
            _BUILD["result"] = build(SOURCES, name, flags)
        return _BUILD["result"]


def available() -> str | None:
    """None once the extension is built (or loaded from torch's cache), else the build's error."""
    result = extension()
    return result if isinstance(result, str) else None


DIAGONAL_CHUNK = 64
"""Rows per GEMM where a block crosses the causal diagonal (each against the keys its last row may
see). M = 64 GEMMs run at ~90% of MKL's 256-row speed; 32, 64, 128 within 1%, no chunks 5% slower."""


def bf16_kernel(ext: ModuleType, isa: str | None = None) -> bool:
    """Whether bfloat16 input runs on the bf16 dot-product units: the CPU has AVX512_BF16 (checked at
    run time) and neither ``isa`` nor the environment variable ``ATTNBENCH_FUSED_ISA`` says ``avx2``."""
    isa = isa or os.environ.get(FORCE_ISA, "")
    if isa not in ("", "avx2", "avx512_bf16"):
        raise UsageError(f"tiled_fused: isa={isa!r}; one of avx2, avx512_bf16")
    return isa != "avx2" and bool(ext.has_avx512bf16())


def _forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, causal: bool,
             scale: float, block_q: int, block_k: int, isa: str | None = None,
             diagonal_chunk: int = DIAGONAL_CHUNK) -> tuple[torch.Tensor, torch.Tensor]:
    """Output (B, H, Tq, d) and natural-log LSE (B, H, Tq): bf16 output and float32 LSE from the bf16
    kernel, else both in float32 (float64 for float64 input)."""
    ext = extension()
    if isinstance(ext, str):
        raise RuntimeError(ext)
    b, h, tq, d = q.shape
    m = None if mask is None else mask.to(torch.bool).expand(b, h, tq, k.shape[2]).view(torch.uint8)
    items = [(bi, hi, q0) for q0 in range(0, tq, block_q) for bi in range(b) for hi in range(h)]
    if causal:  # the longest items first, so the workers finish together
        items.sort(key=lambda item: -item[2])
    if q.dtype == torch.bfloat16 and bf16_kernel(ext, isa):
        q2, k2, v2 = (x if x.stride(-1) == 1 else x.contiguous() for x in (q, k, v))
        out = torch.empty(b, h, tq, d, dtype=torch.bfloat16)
        lse = torch.empty(b, h, tq, dtype=torch.float32)
        run_parallel(items, lambda item, _: ext.forward_item_bf16(
            q2, k2, v2, m, out, lse, item[0], item[1], item[2], min(item[2] + block_q, tq), causal,
            scale * LOG2E, block_k, diagonal_chunk))
        return out, lse
    dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
    q2, k2, v2 = q.to(dtype), k.to(dtype), v.to(dtype)  # views for float32 / float64 input, any strides
    out = torch.empty(b, h, tq, d, dtype=dtype)
    lse = torch.empty(b, h, tq, dtype=dtype)

    def one(item: tuple[int, int, int], cache: dict) -> None:
        bi, hi, q0 = item
        if "scratch" not in cache:
            cache["scratch"] = torch.empty(block_q * (block_k + d), dtype=dtype)
        ext.forward_item(q2, k2, v2, m, out, lse, cache["scratch"], bi, hi, hi + 1, q0,
                         min(q0 + block_q, tq), causal, scale * LOG2E, block_k, diagonal_chunk)

    run_parallel(items, one)
    return out, lse


def _backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, lse: torch.Tensor,
              dout: torch.Tensor, mask: torch.Tensor | None, causal: bool, scale: float, block_q: int,
              block_k: int, isa: str | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dQ, dK, dV in float32: work items are key blocks of one kv head (dK, dV private to the item);
    dQ accumulates in one buffer per worker, summed at the end."""
    ext = extension()
    assert not isinstance(ext, str)  # the forward ran
    b, h, tq, d = q.shape
    hk, tk = k.shape[1], k.shape[2]
    lse2 = torch.where(lse == -math.inf, math.inf, lse.float() * LOG2E).contiguous()  # empty rows: P = 0
    delta = (dout.float() * out.float()).sum(-1).contiguous()  # D_i = rowsum(dO * O)
    m = None if mask is None else mask.to(torch.bool).expand(b, h, tq, tk).view(torch.uint8)
    bf16 = q.dtype == torch.bfloat16 and dout.dtype == torch.bfloat16 and bf16_kernel(ext, isa)
    kernel = ext.backward_item_bf16 if bf16 else ext.backward_item
    # Tiles with two float32 score blocks (P, dS) to keep in L2: at T = 4096, float32 256 x 256 and
    # bf16 128 x 512 were 5-15% faster than the forward's 512 x 512 (noisy; within 5% at d = 64 bf16).
    block_q, block_k = (min(block_q, 128), block_k) if bf16 else (min(block_q, 256), min(block_k, 256))
    q2, k2, v2, do2 = ((x if x.stride(-1) == 1 else x.contiguous()) if bf16 else x.float() for x in (q, k, v, dout))
    dk = torch.zeros(b, hk, tk, d)
    dv = torch.zeros(b, hk, tk, d)
    items = [(bi, hi, k0) for k0 in range(0, tk, block_k) for bi in range(b) for hi in range(hk)]

    def one(item: tuple[int, int, int], cache: dict) -> None:
        bi, hi, k0 = item
        if "dq" not in cache:
            cache["dq"] = torch.zeros(b, h, tq, d)
        kernel(q2, k2, v2, do2, lse2, delta, m, cache["dq"], dk, dv, bi, hi, k0, min(k0 + block_k, tk),
                          causal, scale * LOG2E, scale, block_q)

    dqs = [cache["dq"] for cache in run_parallel(items, one) if "dq" in cache]
    for other in dqs[1:]:
        dqs[0].add_(other)
    return dqs[0], dk, dv


def fused_blocks(tq: int, tk: int, d: int, bf16: bool = False) -> tuple[int, int]:
    """``tiled``'s per-shape blocks, with 512 query rows at d <= 64 (and 512 x 512 up to d = 128 in
    bf16, whose kernel works in 64-row chunks anyway): each packed K and V tile serves more rows.
    At B1-H8-T4096 (interleaved runs): d = 64, 512 x 512 was 2-5% faster than 256 x 512; bf16
    d = 128, 512 x 512 was 4-6% faster than 256 x 512."""
    if bf16 and d <= 128:
        return min(512, max(tq, 16)), min(512, max(tk, 16))
    block_q, block_k = pick_blocks(tq, tk, d)
    return (min(512, max(tq, 16)) if d <= 64 else block_q), block_k


class FusedFlashAttention(torch.autograd.Function):
    """The fused forward; the backward is ``tiled``'s recomputation from the saved output and LSE."""

    @staticmethod
    def forward(ctx, q, k, v, mask, causal, scale, block_q, block_k, isa):  # type: ignore[override]
        scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
        out, lse = _forward(q, k, v, mask, causal, scale, block_q, block_k, isa)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.args = (mask, causal, scale, block_q, block_k, isa)
        ctx.mark_non_differentiable(lse)
        return out.to(q.dtype), lse

    @staticmethod
    def backward(ctx, dout, _dlse):  # type: ignore[override]
        q, k, v, out, lse = ctx.saved_tensors
        if q.dtype == torch.float64:  # tiled's torch-ops backward keeps float64
            mask, causal, scale, block_q, block_k, _ = ctx.args
            plan = _Plan(q, k, v, causal, mask, scale, block_q, block_k)
            n, g, tq = plan.n, plan.g, plan.tq  # tiled's layout: (B * Hkv, G, Tq, ...), a view of ours
            dq, dk, dv = backward(plan, out.view(n, g, tq, -1), lse.view(n, g, tq), dout)
        else:
            dq, dk, dv = _backward(q, k, v, out, lse, dout, *ctx.args)
        return (dq.view(q.shape).to(q.dtype), dk.view(k.shape).to(k.dtype), dv.view(v.shape).to(v.dtype),
                None, None, None, None, None, None)


def fused_flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
                          mask: torch.Tensor | None = None, scale: float | None = None,
                          block_q: int | None = None, block_k: int | None = None, isa: str | None = None
                          ) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention output (B, H, Tq, d) in q's dtype and the natural-log LSE (B, H, Tq); ``isa="avx2"``
    forces bf16 input onto the float32 path (see :func:`bf16_kernel`)."""
    for name, size in (("block_q", block_q), ("block_k", block_k)):
        if size is not None and (not isinstance(size, int) or size < 1):
            raise UsageError(f"tiled_fused: {name}={size!r}; block sizes are positive integers, e.g. 256")
    auto_q, auto_k = fused_blocks(q.shape[2], k.shape[2], q.shape[3], q.dtype == torch.bfloat16)
    return FusedFlashAttention.apply(q, k, v, mask, causal, scale, block_q or auto_q, block_k or auto_k, isa)


@register("tiled_fused", backend="torch", memory="linear", dtypes=("float32", "float64", "bfloat16", "float16"),
          causal=True, mask=True, gqa=True, grad=True, available=available,
          options={"block_q": BLOCKS, "block_k": BLOCKS},
          description="FlashAttention-2 compiled: fused softmax, MKL float32 / AVX512_BF16 tile GEMMs, compiled backward")
def tiled_fused(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
                mask: torch.Tensor | None = None, scale: float | None = None,
                block_q: int | None = None, block_k: int | None = None) -> torch.Tensor:
    """Blocks default to :func:`fused_blocks` for the shape; any positive sizes give the same result."""
    return fused_flash_attention(q, k, v, causal=causal, mask=mask, scale=scale, block_q=block_q, block_k=block_k)[0]
