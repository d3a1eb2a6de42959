"""Module weights in PyTorch's own layout, and seeded module inputs (X, weights, masks, bias).

The layout is ``nn.MultiheadAttention``'s and ``nn.TransformerEncoderLayer``'s, so a
NumPy textbook module and the PyTorch modules read the very same numbers:

- ``in_proj_weight`` (3D, D): rows ``[0:D]`` project Q, ``[D:2D]`` K, ``[2D:3D]`` V; ``y = x W^T + b``;
  with grouped-query attention (``kv_heads`` < heads) K and V are ``kv_heads * head_dim`` rows each, so
  the packed weight is (D + 2 Dkv, D), rows Q, then K, then V;
- ``out_proj_weight`` (D, D) and the optional biases;
- encoder layers add ``linear1`` (F, D), ``linear2`` (D, F), ``norm1``, ``norm2`` (D) and ``eps``.

As for kernels, everything is drawn in float64 from a seeded generator and rounded to the
case's dtype; the float64 copies are the rounded values, so the reference answers the
question the implementation was asked.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from harness.case.positional import alibi_bias
from harness.modules.cases import ModuleCase
from harness.reference.tensors import TORCH_DTYPES


@dataclass(frozen=True)
class MultiheadWeights:
    """``nn.MultiheadAttention``'s parameters (arrays of one backend and dtype); biases may be None."""

    in_proj_weight: Any
    in_proj_bias: Any | None
    out_proj_weight: Any
    out_proj_bias: Any | None

    def map(self, fn: Callable[[Any], Any]) -> MultiheadWeights:
        """The same weights with ``fn`` applied to every array (e.g. a dtype or backend change)."""
        mapped: MultiheadWeights = _map(self, fn)
        return mapped

    def load_into(self, module: torch.nn.MultiheadAttention) -> None:
        """Copy into an ``nn.MultiheadAttention`` built with the same sizes, dtype and ``bias``."""
        with torch.no_grad():
            module.in_proj_weight.copy_(_torch(self.in_proj_weight))
            module.out_proj.weight.copy_(_torch(self.out_proj_weight))
            if module.in_proj_bias is not None:
                module.in_proj_bias.copy_(_torch(self.in_proj_bias))
                module.out_proj.bias.copy_(_torch(self.out_proj_bias))


@dataclass(frozen=True)
class EncoderLayerWeights:
    """``nn.TransformerEncoderLayer``'s parameters and configuration (ReLU, dropout 0)."""

    self_attn: MultiheadWeights
    linear1_weight: Any
    linear1_bias: Any
    linear2_weight: Any
    linear2_bias: Any
    norm1_weight: Any
    norm1_bias: Any
    norm2_weight: Any
    norm2_bias: Any
    norm_first: bool = False
    """False: post-LN ``x = norm1(x + attn(x)); x = norm2(x + ff(x))``; True: pre-LN
    ``x = x + attn(norm1(x)); x = x + ff(norm2(x))``."""
    eps: float = 1e-5

    def map(self, fn: Callable[[Any], Any]) -> EncoderLayerWeights:
        mapped: EncoderLayerWeights = _map(self, fn)
        return mapped

    def load_into(self, layer: torch.nn.TransformerEncoderLayer) -> None:
        """Copy into an ``nn.TransformerEncoderLayer`` of the same sizes and dtype."""
        self.self_attn.load_into(layer.self_attn)
        with torch.no_grad():
            for name in ("linear1", "linear2", "norm1", "norm2"):
                getattr(layer, name).weight.copy_(_torch(getattr(self, f"{name}_weight")))
                getattr(layer, name).bias.copy_(_torch(getattr(self, f"{name}_bias")))


Weights = MultiheadWeights | EncoderLayerWeights


def _map(weights: Any, fn: Callable[[Any], Any]) -> Any:
    changes = {}
    for f in dataclasses.fields(weights):
        value = getattr(weights, f.name)
        if isinstance(value, MultiheadWeights):
            changes[f.name] = value.map(fn)
        elif isinstance(value, (torch.Tensor, np.ndarray)):
            changes[f.name] = fn(value)
    return dataclasses.replace(weights, **changes)


def _torch(x: Any) -> torch.Tensor:
    return x if isinstance(x, torch.Tensor) else torch.from_numpy(np.asarray(x))


@dataclass
class ModuleInputs:
    """One trial: ``x, weights, mask, bias`` for the implementation; ``*64`` (torch float64) for the reference."""

    x: Any
    weights: Weights
    mask: Any | None
    """Key padding, (B, T) bool, True = a real token that may be attended to."""
    bias: Any | None
    """Additive attention bias (1, H, T, T) in the case's dtype (ALiBi), or None."""
    x64: torch.Tensor
    weights64: Weights
    mask64: torch.Tensor | None
    bias64: torch.Tensor | None
    past_key: Any | None = None
    """The KV cache of ``case.past`` earlier positions, (B, kv_heads, past, head_dim), in the case's dtype."""
    past_value: Any | None = None
    past_key64: torch.Tensor | None = None
    past_value64: torch.Tensor | None = None

    def kwargs(self, case: ModuleCase, computes: Sequence[str] = ()) -> dict[str, object]:
        """Keyword arguments of the module contract; ``bias``, ``rope``, ``kv_heads`` and the cache
        (``past_key``, ``past_value``) only when the case uses them. A bias the module ``computes`` itself
        (:func:`harness.modules.cases.module_positional_biases`) is asked for by name, ``positional_bias="alibi"``,
        instead of handed over as a tensor."""
        kwargs: dict[str, object] = {"heads": case.heads, "weights": self.weights, "mask": self.mask,
                                  "causal": case.causal}
        if case.bias in computes:
            kwargs["positional_bias"] = case.bias
        elif self.bias is not None:
            kwargs["bias"] = self.bias
        if case.rope != "none":
            kwargs["rope"] = case.rope
        if case.kv_heads != case.heads:
            kwargs["kv_heads"] = case.kv_heads
        if case.past:
            kwargs["past_key"], kwargs["past_value"] = self.past_key, self.past_value
        return kwargs


def draw_weights(case: ModuleCase, gen: torch.Generator) -> Weights:
    """Float64 weights at the scale of PyTorch's own initialisation (so activations stay O(1))."""
    d, f = case.d_model, case.dim_ff

    def randn(*shape: int, scale: float) -> torch.Tensor:
        return torch.randn(*shape, generator=gen, dtype=torch.float64) * scale

    rows = d + 2 * case.kv_dim  # Q, K, V packed; 3 d without GQA
    attn = MultiheadWeights(
        in_proj_weight=randn(rows, d, scale=d ** -0.5),
        in_proj_bias=randn(rows, scale=0.1) if case.proj_bias else None,
        out_proj_weight=randn(d, d, scale=d ** -0.5),
        out_proj_bias=randn(d, scale=0.1) if case.proj_bias else None,
    )
    if case.layer == "mha":
        return attn
    return EncoderLayerWeights(
        self_attn=attn,
        linear1_weight=randn(f, d, scale=d ** -0.5), linear1_bias=randn(f, scale=0.1),
        linear2_weight=randn(d, f, scale=f ** -0.5), linear2_bias=randn(d, scale=0.1),
        norm1_weight=1.0 + randn(d, scale=0.1), norm1_bias=randn(d, scale=0.1),
        norm2_weight=1.0 + randn(d, scale=0.1), norm2_bias=randn(d, scale=0.1),
        norm_first=case.norm_first,
    )


def key_padding(case: ModuleCase, gen: torch.Generator) -> torch.Tensor:
    """(B, keys) True = real token; batch element 0 unpadded, the others keep 1..keys tokens (keys: the cached
    positions and the new ones)."""
    lengths = torch.randint(1, case.keys + 1, (case.batch,), generator=gen)
    lengths[0] = case.keys
    return torch.arange(case.keys)[None, :] < lengths[:, None]


def make_module_inputs(case: ModuleCase, seed: int, backend: str = "torch") -> ModuleInputs:
    """Draw one trial of the case for ``backend`` ("torch" or "numpy")."""
    gen = torch.Generator().manual_seed(seed)
    dtype = TORCH_DTYPES[case.dtype]
    x64 = torch.randn(case.batch, case.seq, case.d_model, generator=gen, dtype=torch.float64)
    w64 = draw_weights(case, gen)
    mask64 = key_padding(case, gen) if case.mask == "key_padding" else None
    bias64 = alibi_bias(case.heads, case.seq, case.seq) if case.bias == "alibi" else None
    def rounded(t: torch.Tensor) -> torch.Tensor:
        return t.to(dtype).to(torch.float64)

    x64, w64 = rounded(x64), w64.map(rounded)
    bias64 = None if bias64 is None else rounded(bias64)
    to: Callable[[torch.Tensor], Any]
    if backend == "torch":
        to = lambda t: t.to(dtype).to(case.device)
        mask = None if mask64 is None else mask64.to(case.device)
    else:
        to = lambda t: t.numpy().astype(case.dtype)
        mask = None if mask64 is None else mask64.numpy()  # type: ignore[assignment]  # numpy backend
    bias = None if bias64 is None else to(bias64)
    inputs = ModuleInputs(to(x64), w64.map(to), mask, bias, x64, w64, mask64, bias64)
    if case.past:  # drawn last: the draws of a case without a cache are unchanged
        shape = (case.batch, case.kv_heads, case.past, case.head_dim)
        k64, v64 = (rounded(torch.randn(*shape, generator=gen, dtype=torch.float64)) for _ in range(2))
        inputs = dataclasses.replace(inputs, past_key=to(k64), past_value=to(v64), past_key64=k64, past_value64=v64)
    return inputs
