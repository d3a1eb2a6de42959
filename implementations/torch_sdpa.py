"""``F.scaled_dot_product_attention``: PyTorch's own dispatch, and one variant pinned to each backend.

A pinned variant is available for a case only where PyTorch itself can run it: we ask
PyTorch on a tiny input of the case's kind (device, dtype, mask, causal, GQA, grad)
inside ``sdpa_kernel(backend)`` and, when it refuses, report PyTorch's own words
(its error plus the warnings in which it explains why each kernel was not used).
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

if TYPE_CHECKING:
    from harness.cases import AttentionCase

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
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, scale=scale,
                                          enable_gqa=gqa)


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


@register("torch_sdpa", backend="torch", memory="linear", dtypes=ALL_DTYPES, devices=("cpu", "cuda"),
          causal=True, mask=True, gqa=True, grad=True, bias=True,
          available=lambda case: _scale_zero_causal(case, None),
          description="F.scaled_dot_product_attention with PyTorch's own backend choice")
def torch_sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **kwargs: Any) -> torch.Tensor:
    return sdpa(q, k, v, **kwargs)


@functools.cache
def _probe(backend_name: str, device: str, dtype: str, mask: tuple[int, ...] | None, causal: bool, gqa: bool,
           grad: bool, layout: str) -> str | None:
    """Run the pinned backend on a tiny input of this kind; None if it ran, else PyTorch's reason."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = getattr(SDPBackend, backend_name)
    kv_heads = 1 if gqa else 2
    def make(heads: int) -> torch.Tensor:
        x = torch.randn(1, 8, heads, 32, dtype=getattr(torch, dtype), device=device).transpose(1, 2)
        if layout == "strided":
            return x[..., ::2]  # last-dimension stride 2, as the case's inputs
        return x if layout == "transposed" else x[..., :16].contiguous()

    q, k, v = make(2), make(kv_heads), make(kv_heads)
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


def _mask_shape(case: AttentionCase) -> tuple[int, ...] | None:
    """The probe's mask: the case's rank on 8 x 8 (backends accept some mask shapes and not others)."""
    if case.mask == "none":
        return None
    if case.mask_rank == "full":
        return (1, 1, 1, 8) if case.mask.startswith("key_padding") else (1, 2, 8, 8)
    return {"2d": (8, 8), "3d": (2, 8, 8), "bcast_heads": (1, 1, 8, 8)}[case.mask_rank]


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
        return _probe(backend_name, case.device, case.dtype, _mask_shape(case), case.causal,
                      case.kv_heads != case.heads, case.grad, _qkv_layout(case)) or _scale_zero_causal(case, backend_name)

    def run(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        with sdpa_kernel(getattr(SDPBackend, backend_name)):
            return sdpa(q, k, v, **kwargs)

    return register(
        f"torch_sdpa_{backend_name.split('_')[0].lower()}", backend="torch", dtypes=ALL_DTYPES,
        devices=devices, causal=True, mask=True, gqa=True, grad=True, available=available, memory=memory,
        description=f"SDPA pinned to SDPBackend.{backend_name}"
        + ("" if "cpu" in devices else " (PyTorch implements it for CUDA only)"),
    )(run)


# On CPU PyTorch implements the math and flash backends; efficient and cuDNN are CUDA kernels.
torch_sdpa_math = _pinned("MATH", ("cpu", "cuda"), "quadratic")
torch_sdpa_flash = _pinned("FLASH_ATTENTION", ("cpu", "cuda"), "linear")
torch_sdpa_efficient = _pinned("EFFICIENT_ATTENTION", ("cuda",), "linear")
torch_sdpa_cudnn = _pinned("CUDNN_ATTENTION", ("cuda",), "linear")
