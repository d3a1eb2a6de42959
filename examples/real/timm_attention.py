"""timm's ViT attention layers (Apache-2.0), as they are: ``timm.layers.Attention`` (the class
``timm.models.vision_transformer`` uses) with ``fused_attn`` on and off, and ``AttentionRope`` (EVA, ViT-RoPE)
in both of its RoPE pairings.

``pip install 'attnbench[timm]'`` (timm 1.0.20 and torchvision 0.28.0, the release built for torch 2.13.0:
timm imports torchvision at import time). They are module plugins: each layer owns its projections, so
attnbench's weights are loaded into ``qkv`` (packed rows Q, K, V, PyTorch's own layout) and ``proj``. The
layers take no ``causal`` and add ``attn_mask`` to the scores (``maybe_add_mask``; the fused path hands it to
SDPA): ``Conventions(mask_kind="additive", takes_causal=False)`` says so, and attnbench passes key padding and
causal masking as one additive (B, 1, T, T) mask. ``AttentionRope`` takes its RoPE as ``cat([sin, cos])``
tables, which ``rope_tables`` gives at positions 0 .. T-1 (base 10000); ``rotate_half=True`` pairs feature i
with i + d/2, ``False`` (timm's default) 2i with 2i+1.
"""

from __future__ import annotations

import torch

from harness import Conventions, register_module
from harness.case.positional import rope_tables

try:
    from timm.layers import Attention, AttentionRope
    MISSING = None
except Exception as exc:  # noqa: BLE001  (torchvision built for CUDA beside a CPU torch raises RuntimeError)
    MISSING = (f"timm does not import here ({type(exc).__name__}: {exc}): pip install 'attnbench[timm]'; with a "
               "CPU torch, torchvision==0.28.0+cpu from https://download.pytorch.org/whl/cpu (PyPI's is a CUDA build)")


def installed(case: object = None) -> str | None:
    return MISSING


TIMM = Conventions(mask_kind="additive", takes_causal=False)
DTYPES = ("float32", "float64", "bfloat16")


def _loaded(layer: torch.nn.Module, x: torch.Tensor, weights) -> torch.nn.Module:
    """``layer`` in x's dtype, with the case's weights in ``qkv`` and ``proj``."""
    layer = layer.to(dtype=x.dtype, device=x.device).eval().requires_grad_(False)
    with torch.no_grad():
        for linear, weight, bias in ((layer.qkv, weights.in_proj_weight, weights.in_proj_bias),
                                     (layer.proj, weights.out_proj_weight, weights.out_proj_bias)):
            linear.weight.copy_(weight)
            if bias is not None:
                linear.bias.copy_(bias)
    return layer


def _attention(x, heads, weights, fused):
    layer = Attention(x.shape[-1], heads, qkv_bias=weights.in_proj_bias is not None,
                      proj_bias=weights.out_proj_bias is not None)
    layer.fused_attn = fused
    return _loaded(layer, x, weights)


@register_module("timm_attention", backend="torch", dtypes=DTYPES, causal=True, mask=True, prepare=True,
          available=installed, conventions=TIMM, description="timm.layers.Attention (fused_attn=True: SDPA)")
def timm_attention(x, *, heads, weights, mask=None):
    layer = _attention(x, heads, weights, fused=True)
    return lambda: layer(x, attn_mask=mask)


@register_module("timm_attention_unfused", backend="torch", dtypes=DTYPES, causal=True, mask=True,
          prepare=True, available=installed, conventions=TIMM,
          description="timm.layers.Attention (fused_attn=False: softmax(q k^T + mask) v)")
def timm_attention_unfused(x, *, heads, weights, mask=None):
    layer = _attention(x, heads, weights, fused=False)
    return lambda: layer(x, attn_mask=mask)


@register_module("timm_attention_rope", backend="torch", dtypes=("float32", "float64"), causal=True,
          mask=True, prepare=True, available=installed, conventions=TIMM,
          rope=("interleaved", "rotate_half"),
          description="timm.layers.AttentionRope (num_prefix_tokens=0), both RoPE pairings")
def timm_attention_rope(x, *, heads, weights, mask=None, rope=None):
    layer = _loaded(AttentionRope(x.shape[-1], heads, qkv_bias=weights.in_proj_bias is not None,
                                  proj_bias=weights.out_proj_bias is not None, num_prefix_tokens=0,
                                  rotate_half=rope == "rotate_half"), x, weights)
    tables = None
    if rope is not None:
        cos, sin = rope_tables(x.shape[1], x.shape[-1] // heads, rope)
        tables = torch.cat([sin, cos], dim=-1).to(dtype=x.dtype, device=x.device)
    return lambda: layer(x, rope=tables, attn_mask=mask)
