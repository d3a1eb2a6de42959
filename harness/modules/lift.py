"""Lift a kernel plugin into the module suite: projections, head split, RoPE and merge around it.

``lift(kernel)`` returns a module implementation (``kind="module"``, layer ``mha``) that
computes ``out_proj(kernel(split(x Wq), split(x Wk), split(x Wv)))`` in the kernel's own
backend and dtype, so a user sees how a kernel behaves inside a real layer, checked
against ``nn.MultiheadAttention``. The lifted module declares the kernel's capabilities
(dtypes, devices, causal, mask, bias) and, per case, the kernel's own reasons for the
equivalent kernel case (a pinned SDPA backend that refuses, a kernel's size limit). RoPE
is applied by the harness (in float64, rounded to the dtype) around the kernel, so every
lifted kernel supports both conventions.

A plugin file lifts its kernel with one line: ``my_attention_mha = lift(my_attention)``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from harness.case.attention import AttentionCase
from harness.case.positional import ROPE_CONVENTIONS, apply_rope
from harness.contract.registry import Implementation, make_implementation
from harness.errors import PluginError

if TYPE_CHECKING:
    from harness.modules.cases import ModuleCase
    from harness.modules.weights import MultiheadWeights


def kernel_case_for(case: ModuleCase) -> AttentionCase:
    """The kernel call a module case makes: (B, H, T, d_model/H) queries over (B, Hkv, past + T, d) keys, key
    padding as a boolean mask; continuing from a KV cache, causal arrives as a boolean mask too (bottom-right)."""
    masked = case.mask != "none" or (case.past > 0 and case.causal)
    return AttentionCase(batch=case.batch, heads=case.heads, kv_heads=case.kv_heads, tq=case.seq, tk=case.keys,
                         d=case.head_dim, dtype=case.dtype, device=case.device, causal=case.causal and not case.past,
                         mask="key_padding" if masked else "none", bias=case.bias)


def _as_impl(kernel: Implementation | Callable[..., Any]) -> Implementation:
    impl = kernel if isinstance(kernel, Implementation) else getattr(kernel, "__attnbench__", None)
    if not isinstance(impl, Implementation):
        raise PluginError(f"lift() takes a kernel Implementation or a function decorated with @register, "
                          f"got {kernel!r}")
    if impl.declared.kind != "kernel":
        raise PluginError(f"lift(): {impl.name!r} is a {impl.declared.kind} implementation; only kernels can be lifted")
    return impl


def lifted_forward(kernel: Implementation) -> Callable[..., Any]:
    """The module function ``fn(x, *, heads, weights, mask, causal, bias, rope)`` around ``kernel``."""
    numpy = kernel.declared.backend == "numpy"

    def split(y: Any, b: int, t: int, heads: int) -> Any:  # (B, T, D) -> (B, H, T, d)
        y = y.reshape(b, t, heads, -1)
        return np.swapaxes(y, 1, 2) if numpy else y.transpose(1, 2)

    def rotate(y: Any, rope: str, offset: int) -> Any:
        if numpy:
            return apply_rope(torch.from_numpy(np.ascontiguousarray(y)), rope, offset=offset).numpy()
        return apply_rope(y, rope, offset=offset)

    def forward(x: Any, *, heads: int, weights: MultiheadWeights, mask: Any = None, causal: bool = False,
                bias: Any = None, rope: str | None = None, kv_heads: int | None = None, past_key: Any = None,
                past_value: Any = None) -> Any:
        b, t, d_model = x.shape
        kv = (kv_heads or heads) * (d_model // heads)
        qkv = x @ weights.in_proj_weight.T
        if weights.in_proj_bias is not None:
            qkv = qkv + weights.in_proj_bias
        q = split(qkv[..., :d_model], b, t, heads)
        k, v = (split(qkv[..., d_model + i * kv:d_model + (i + 1) * kv], b, t, kv_heads or heads) for i in range(2))
        past = 0 if past_key is None else past_key.shape[2]
        if rope:
            q, k = rotate(q, rope, past), rotate(k, rope, past)
        if past:
            join = np.concatenate if numpy else torch.cat
            k, v = join([past_key, k], 2), join([past_value, v], 2)
        allowed = None if mask is None else mask.reshape(b, 1, 1, past + t)
        if past and causal:  # bottom-right causal as a boolean mask: the kernel's causal is top-left
            rule_np = np.tril(np.ones((t, past + t), dtype=bool), past)
            rule: Any = rule_np if numpy else torch.from_numpy(rule_np).to(x.device)
            allowed = rule if allowed is None else allowed & rule
            causal = False
        kwargs: dict[str, object] = {"causal": causal, "scale": None, "mask": allowed}
        if bias is not None:
            kwargs["bias"] = bias
        out = kernel.prepare(q, k, v, **kwargs)()
        out = (np.swapaxes(out, 1, 2) if numpy else out.transpose(1, 2)).reshape(b, t, d_model)
        out = out @ weights.out_proj_weight.T
        return out if weights.out_proj_bias is None else out + weights.out_proj_bias

    return forward


def lift(kernel: Implementation | Callable[..., Any], *, name: str | None = None) -> Implementation:
    """The module form of ``kernel``, named ``<kernel>_mha`` unless ``name`` is given.

    Discovery finds it as an attribute of the plugin module that holds it, like a decorated
    function: ``my_attention_mha = lift(my_attention)`` at the top level of the file.
    """
    impl = _as_impl(kernel)
    forward = lifted_forward(impl)
    forward.__qualname__ = forward.__name__ = name or f"{impl.name}_mha"

    def available(case: Any) -> str | None:
        kernel_case = kernel_case_for(case)  # the module case's kernel call
        reasons = impl.not_supported_reasons(kernel_case)
        return f"kernel {impl.name}: " + "; ".join(reasons) if reasons else None

    declared = impl.declared
    lifted = make_implementation(
        forward.__name__, forward, backend=declared.backend, dtypes=declared.dtypes, devices=declared.devices,
        kind="module", causal=declared.causal, mask=declared.mask, bias=declared.bias, gqa=declared.gqa, available=available,
        layers=("mha",), rope=ROPE_CONVENTIONS, kernel=impl.name, kv_cache=declared.mask,
        description=f"kernel {impl.name} inside multi-head attention (projections around it)",
    )
    # Errors point at the kernel's own source: that is the code a user would fix.
    return dataclasses.replace(lifted, source=f"{impl.source} (lifted as {lifted.name})")
