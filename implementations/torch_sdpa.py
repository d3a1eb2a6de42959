"""``F.scaled_dot_product_attention``: PyTorch's own dispatch, and one variant pinned to each backend.

A pinned variant is available for a case only where PyTorch itself can run it: we ask
PyTorch on a tiny input of the case's kind (device, dtype, mask, causal, GQA, grad)
inside ``sdpa_kernel(backend)`` and, when it refuses, report PyTorch's own words
(its error plus the warnings in which it explains why each kernel was not used).

Every variant but the flash one declares ``value_dim``: SDPA's signature takes V with its own head dim,
and PyTorch's dispatch, its math backend and the CUDA memory-efficient and cuDNN kernels compute it. The flash
backend wants one head dim for q, k and v ("Flash attention requires q,k,v to have the same last dimension"),
so it does not declare it: a declared capability that every case of it is refused is a failure of verify's
coverage, not a pass. Each backend is still asked on a V of the case's head dim, like any other input.
"""

from __future__ import annotations

import contextlib
import functools
import re
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F

from harness import register
from harness.case.dtypes import FP8_DTYPES
from implementations._fp8 import dequantized

if TYPE_CHECKING:
    from harness.case.attention import AttentionCase

_TRIGGERED = re.compile(r"\s*\(Triggered internally at [^)]*\)\.?")
ALL_DTYPES = ("float64", "float32", "bfloat16", "float16")


def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
         mask: torch.Tensor | None = None, scale: float | None = None,
         bias: torch.Tensor | None = None) -> torch.Tensor:
    """SDPA with the contract's semantics: causal and a mask together become one boolean mask.

    An additive ``bias`` becomes SDPA's float ``attn_mask``, with forbidden keys set to -inf.
    """
    gqa = q.shape[1] != k.shape[1]
    if bias is not None:
        allowed = mask
        if causal:
            tril = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).tril()
            allowed = tril if allowed is None else allowed & tril
        mask = bias.to(q.dtype) if allowed is None else bias.to(q.dtype).masked_fill(~allowed, float("-inf"))
        causal = False
    if causal and mask is not None:
        mask = mask & torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).tril()
        causal = False
    if gqa and not causal and _same_keys_for_every_row(q, mask):
        return _grouped_rows(q, k, v, mask, scale)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, scale=scale,
                                          enable_gqa=gqa)


def _same_keys_for_every_row(q: torch.Tensor, mask: torch.Tensor | None) -> bool:
    """True where every query row of a head sees the same keys: no mask, or one query row (decode) with a mask
    that does not differ by head."""
    if mask is None:
        return True
    return q.shape[-2] == 1 and (mask.dim() <= 2 or (mask.dim() == 4 and mask.shape[1] == 1))


def _grouped_rows(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
                  scale: float | None) -> torch.Tensor:
    """GQA as one KV head's attention over its group's query rows stacked, ``(B, Hkv, G*Tq, d)``: PyTorch's CPU math
    path would copy K and V once per query head (``enable_gqa``), 5 GB for MLA decode's 128 query heads on one
    576-wide latent of 4,096 keys, where this reads them once (FlashAttention's decode does the same swap)."""
    b, heads, tq, _ = q.shape
    kv_heads = k.shape[1]
    rows = q.reshape(b, kv_heads, (heads // kv_heads) * tq, q.shape[-1])
    if mask is not None and mask.dim() <= 2:  # (Tk,) or (1, Tk): one row for every head
        mask = mask.reshape(1, 1, 1, mask.shape[-1])
    out = F.scaled_dot_product_attention(rows, k, v, attn_mask=mask, scale=scale)
    return out.reshape(b, heads, tq, v.shape[-1])


@functools.cache
def _scale_zero_causal_reason(device: str, backend_name: str | None) -> str | None:
    """PyTorch's answer to scale=0 with is_causal on a tiny input: NaN from its CPU flash kernel (masked scores
    of -inf times a scale of 0), though every score is then 0 and the answer is the mean of the allowed rows."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q = torch.ones(1, 1, 3, 8, device=device)
    try:
        with sdpa_kernel(getattr(SDPBackend, backend_name)) if backend_name else contextlib.nullcontext():
            out = F.scaled_dot_product_attention(q, q, q, is_causal=True, scale=0.0)
    except RuntimeError:
        return None  # the backend refuses the input: the other reasons say so
    if torch.isfinite(out).all():
        return None
    where = f"SDPBackend.{backend_name}" if backend_name else "F.scaled_dot_product_attention"
    return f"PyTorch {torch.__version__}'s {where} returns NaN on {device} for scale=0 with is_causal=True"


def _scale_zero_causal(case: AttentionCase, backend_name: str | None) -> str | None:
    if case.scale != 0.0 or not case.causal or case.mask != "none" or case.bias != "none":
        return None  # a mask or a bias goes through attn_mask, which is right at scale 0
    return _scale_zero_causal_reason(case.device, backend_name)


@functools.cache
def _empty_rows_reason(device: str, backend_name: str | None, dtype: str, d: int,
                       shape: tuple[tuple[int, int], tuple[int, int]]) -> str | None:
    """PyTorch's answer for a query row with no allowed key: the contract's zeros, or (cuDNN's kernel on CUDA, as
    PyTorch 2.11 dispatches to it on Hopper) values of its own. Asked on an input of the case's dtype, head dim,
    heads and lengths (up to :data:`PROBE_LENGTH`), so each backend and PyTorch version answers for itself."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    torch_dtype = getattr(torch, dtype)
    (heads, kv_heads), (tq, tk) = shape
    q = torch.randn(1, heads, tq, d, dtype=torch_dtype, device=device)
    k = torch.randn(1, kv_heads, tk, d, dtype=torch_dtype, device=device)
    mask = torch.ones(1, heads, tq, tk, dtype=torch.bool, device=device)
    mask[..., tq // 2, :] = False
    try:
        with sdpa_kernel(getattr(SDPBackend, backend_name)) if backend_name else contextlib.nullcontext():
            out = F.scaled_dot_product_attention(q, k, k, attn_mask=mask, enable_gqa=heads != kv_heads)
    except RuntimeError:
        return None  # the backend refuses the input: the other reasons say so
    if bool((out[..., tq // 2, :] == 0).all()):
        return None
    where = f"SDPBackend.{backend_name}" if backend_name else "F.scaled_dot_product_attention"
    return (f"PyTorch {torch.__version__}'s {where} returns values other than the contract's zeros on {device} "
            f"({dtype}) for a query row with no allowed key")


def _empty_rows(case: AttentionCase, backend_name: str | None) -> str | None:
    if case.mask != "empty_rows":
        return None
    return _empty_rows_reason(case.device, backend_name, case.dtype, case.d,
                              ((case.heads, case.kv_heads), _lengths(case)))


def _sdpa_quirks(case: AttentionCase, backend_name: str | None) -> str | None:
    """Where PyTorch's answer departs from the contract on this device and version: skipped with its reason."""
    if case.device == "cuda" and not torch.cuda.is_available():
        return None
    return _scale_zero_causal(case, backend_name) or _empty_rows(case, backend_name)


@register("torch_sdpa", backend="torch", memory="linear", dtypes=ALL_DTYPES, devices=("cpu", "cuda"),
          causal=True, mask=True, gqa=True, grad=True, bias=True, value_dim=True,
          kv_dtypes=FP8_DTYPES, kv_scales=("tensor", "head", "token"),
          available=lambda case: _sdpa_quirks(case, None),
          description="F.scaled_dot_product_attention with PyTorch's own backend choice")
def torch_sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, k_scale: torch.Tensor | None = None,
               v_scale: torch.Tensor | None = None, **kwargs: Any) -> torch.Tensor:
    """An FP8 cache is dequantized to q's dtype first (SDPA computes in one dtype): SDPA on the dequantized tensors,
    what a serving stack without an FP8 kernel runs, and timed with the dequantization."""
    if k_scale is not None:
        k, v = dequantized(k, k_scale, q.dtype), dequantized(v, v_scale, q.dtype)
    return sdpa(q, k, v, **kwargs)


@functools.cache
def _probe(backend_name: str, device: str, dtype: str, mask: tuple[int, ...] | None, causal: bool, gqa: bool,
           grad: bool, layout: str, d: int = 16, lengths: tuple[int, int] = (8, 8),
           heads_kv: tuple[int, int] = (2, 2), dv: int = 0) -> str | None:
    """Run the pinned backend on a tiny input of this kind, in the case's head dim ``d`` (CUDA's kernels take some
    head dims and not others: cuDNN and the efficient kernel want multiples of 8) and V's ``dv`` (0: ``d``; some
    kernels want one head dim for q, k and v), with query and key lengths
    that relate as the case's do (``lengths``: CUDA's flash kernel refuses some causal Tq != Tk); None if it ran,
    else PyTorch's reason."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = getattr(SDPBackend, backend_name)
    heads, kv_heads = heads_kv
    def make(heads: int, length: int, dim: int = d) -> torch.Tensor:
        width = 2 * dim if layout == "strided" else dim
        x = torch.randn(1, length, heads, width, dtype=getattr(torch, dtype), device=device).transpose(1, 2)
        if layout == "strided":
            return x[..., ::2]  # last-dimension stride 2, as the case's inputs
        return x if layout == "transposed" else x.contiguous()

    tq, tk = lengths
    q, k, v = make(heads, tq), make(kv_heads, tk), make(kv_heads, tk, dv or d)
    q.requires_grad_(grad)
    bool_mask = None if mask is None else torch.rand(mask, device=device) < 0.8  # the case's mask rank
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with sdpa_kernel(backend):
                out = sdpa(q, k, v, causal=causal, mask=bool_mask)
                if grad:
                    out.sum().backward()
            return None
        except RuntimeError as exc:
            why = [_TRIGGERED.sub("", str(w.message)).strip().rstrip(":") for w in caught]
            why = [w for w in why if w]
            detail = "; ".join(why).replace("because; ", "because: ") if why else str(exc).strip().splitlines()[0]
            return f"PyTorch {torch.__version__} cannot run SDPBackend.{backend_name} here: {detail}"


PROBE_LENGTH = 64
"""The probe runs the case's own lengths up to this: CUDA's kernels choose by length (alignment to 8 or 16,
tile sizes), and a probe of another length can be taken where the case is refused."""


def _lengths(case: AttentionCase) -> tuple[int, int]:
    """The probe's (Tq, Tk): the case's, each at most :data:`PROBE_LENGTH`."""
    return min(case.tq, PROBE_LENGTH), min(case.tk, PROBE_LENGTH)


def _mask_shape(case: AttentionCase) -> tuple[int, ...] | None:
    """The probe's mask: the case's rank on the probe's lengths (backends accept some mask shapes and not others);
    a case whose structures (a window, a cache, packing, an alignment) the harness folds into ``mask=`` gets one too."""
    tq, tk = _lengths(case)
    if case.mask == "none":
        return (tq, tk) if case.structures else None
    if case.mask_rank == "full":
        return (1, 1, 1, tk) if case.mask.startswith("key_padding") else (1, case.heads, tq, tk)
    return {"2d": (tq, tk), "3d": (2, tq, tk), "bcast_heads": (1, 1, tq, tk)}[case.mask_rank]


def _qkv_layout(case: AttentionCase) -> str:
    """The layout the probe lays q, k and v out in: "strided" when any of them is (a fused kernel needs a last
    dimension of stride 1 in all three), else the case's own."""
    layouts = {case.layout_of(name) for name in ("q", "k", "v")}
    return "strided" if "strided" in layouts else case.layout


def _pinned(backend_name: str, devices: tuple[str, ...], memory: str) -> Callable[..., Any]:
    def available(case: AttentionCase) -> str | None:
        if case.device == "cpu" and "cpu" not in devices:
            return None  # the declared devices already give the reason
        if case.device == "cuda" and not torch.cuda.is_available():
            return None
        return (_probe(backend_name, case.device, case.dtype, _mask_shape(case), case.causal,
                       case.kv_heads != case.heads, case.grad, _qkv_layout(case), case.d, _lengths(case),
                       (case.heads, case.kv_heads), case.dv if case.dv != case.d else 0)
                or _sdpa_quirks(case, backend_name))

    def run(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        with sdpa_kernel(getattr(SDPBackend, backend_name)):
            return sdpa(q, k, v, **kwargs)

    return register(
        f"torch_sdpa_{backend_name.split('_')[0].lower()}", backend="torch", dtypes=ALL_DTYPES,
        devices=devices, causal=True, mask=True, gqa=True, grad=True, value_dim=backend_name != "FLASH_ATTENTION",
        available=available,
        memory=memory,
        description=f"SDPA pinned to SDPBackend.{backend_name}"
        + ("" if "cpu" in devices else " (PyTorch implements it for CUDA only)"),
    )(run)


# On CPU PyTorch implements the math and flash backends; efficient and cuDNN are CUDA kernels.
torch_sdpa_math = _pinned("MATH", ("cpu", "cuda"), "quadratic")
torch_sdpa_flash = _pinned("FLASH_ATTENTION", ("cpu", "cuda"), "linear")
torch_sdpa_efficient = _pinned("EFFICIENT_ATTENTION", ("cuda",), "linear")
torch_sdpa_cudnn = _pinned("CUDNN_ATTENTION", ("cuda",), "linear")
