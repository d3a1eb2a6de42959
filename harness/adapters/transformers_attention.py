"""Verify and bench Hugging Face transformers' attention: any function of its attention interface, and an
attention layer built from a model config (``pip install attnbench[transformers]``).

- :func:`attention_function` adapts a function with transformers' attention-interface signature
  ``fn(module, query, key, value, attention_mask, *, dropout, scaling, **kwargs) -> (out, weights)``
  (``ALL_ATTENTION_FUNCTIONS[name]``, or one registered with ``AttentionInterface.register``) to the kernel
  contract: q (B, H, Tq, d) and k, v (B, Hkv, Tk, d) pass as they are (the module the function is handed
  carries ``num_key_value_groups``, so GQA is transformers' own, query head h reading KV head h // group);
  causal and the mask arrive as one 4D mask in the form the function takes (``"bool"``: True = attend, as
  transformers' SDPA path; ``"additive"``: 0 or the dtype's lowest value, as its eager path); the output,
  (B, Tq, H, d) in transformers, is handed back as (B, H, Tq, d).
- :func:`attention_layer` builds a transformers attention layer (``LlamaAttention`` by default) from a
  config made to each module case (hidden size heads x head_dim, the case's heads and KV heads, RoPE base
  10000, projection biases when the case has them), loads the case's weights into ``q_proj``, ``k_proj``,
  ``v_proj`` and ``o_proj``, and calls it as the model does: RoPE's cos and sin from the model's own rotary
  embedding at positions past .. past + T - 1, the KV cache as a ``DynamicCache`` holding the past keys and
  values, the mask 4D (bottom-right causal over the cache, key padding).

Both are registered ``on_request``: transformers leaves a query row with no allowed key to its kernel
(SDPA: NaN; eager: the mean of V), so they run where named (``--only``), and the cases they are given say
what they were checked on. Without transformers installed each is unavailable, with the reason.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Sequence
from typing import Any

import torch

from harness.contract.registry import Implementation, make_implementation

TRANSFORMERS_PIN = "4.57.1"
"""The transformers release the adapter is tested with (the ``transformers`` extra pins it)."""
MASK_KINDS = ("bool", "additive")
INTERFACE_SINCE = {"sdpa": (4, 48)}
"""The attention-interface names every transformers release since the given one registers: for these, the
availability check reads the installed version instead of importing ``transformers.modeling_utils`` (over 3 s of
CPU, most of ``attnbench list``'s time); any other name is looked up in the interface itself."""


def transformers_missing() -> str | None:
    """None when transformers imports here, else the reason and the fix."""
    if importlib.util.find_spec("transformers") is None:
        return (f"transformers is not installed (pip install 'attnbench[transformers]', or "
                f"pip install --no-deps transformers=={TRANSFORMERS_PIN} beside torch)")
    return None


def _release() -> tuple[int, ...]:
    """The installed transformers' (major, minor), from its metadata (nothing imported); (0,) when unreadable."""
    from importlib import metadata

    try:
        return tuple(int(part) for part in metadata.version("transformers").split(".")[:2])
    except (metadata.PackageNotFoundError, ValueError):
        return (0,)


class _Holder(torch.nn.Module):
    """What an attention-interface function reads of its layer: GQA groups, causality, training mode."""

    def __init__(self, groups: int, causal: bool) -> None:
        super().__init__()
        self.num_key_value_groups = groups
        self.is_causal = causal
        self.training = False
        self.attention_dropout = 0.0


def four_d(allowed: torch.Tensor | None, kind: str, dtype: torch.dtype) -> torch.Tensor | None:
    """A boolean "may attend" mask as transformers' 4D attention mask of ``kind``."""
    if allowed is None:
        return None
    while allowed.dim() < 4:
        allowed = allowed.unsqueeze(0)
    if kind == "bool":
        return allowed
    return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill(~allowed, torch.finfo(dtype).min)


def _allowed(tq: int, tk: int, causal: bool, mask: Any, device: torch.device, past: int = 0) -> torch.Tensor | None:
    """Causal (aligned so query i sits at key position past + i) and the mask, as one boolean mask."""
    allowed = torch.ones(tq, tk, dtype=torch.bool, device=device).tril(past) if causal else None
    if mask is not None:
        mask = torch.as_tensor(mask, device=device).to(torch.bool)
        allowed = mask if allowed is None else allowed & mask
    return allowed


def attention_function(fn: Callable[..., Any] | str, *, name: str, mask_kind: str = "bool",
                       dtypes: Sequence[str] = ("float32", "float64"), devices: Sequence[str] = ("cpu",),
                       grad: bool = True, description: str | None = None) -> Implementation:
    """A kernel implementation around a transformers attention-interface function (or its registered name)."""
    if mask_kind not in MASK_KINDS:
        raise ValueError(f"mask_kind {mask_kind!r}: choose one of {MASK_KINDS}")

    def resolve() -> Callable[..., Any]:
        if callable(fn):
            return fn
        from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

        return ALL_ATTENTION_FUNCTIONS[fn]  # type: ignore[no-any-return]

    def kernel(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False, mask: Any = None,
               scale: float | None = None) -> torch.Tensor:
        holder = _Holder(q.shape[1] // k.shape[1], causal)
        allowed = _allowed(q.shape[-2], k.shape[-2], causal, mask, q.device)
        out, _ = resolve()(holder, q, k, v, four_d(allowed, mask_kind, q.dtype), dropout=0.0,
                           scaling=q.shape[-1] ** -0.5 if scale is None else scale, is_causal=False)
        back: torch.Tensor = out.transpose(1, 2)  # transformers returns (B, Tq, H, d)
        return back

    def available(case: Any) -> str | None:
        missing = transformers_missing()
        if missing or callable(fn):
            return missing
        if fn in INTERFACE_SINCE and _release() >= INTERFACE_SINCE[fn]:
            return None
        from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

        known = list(ALL_ATTENTION_FUNCTIONS.valid_keys())
        return None if fn in known else f"no attention function {fn!r} in transformers' interface (has {', '.join(known)})"

    kernel.__name__ = kernel.__qualname__ = name
    label = fn if isinstance(fn, str) else getattr(fn, "__qualname__", repr(fn))
    return make_implementation(
        name, kernel, backend="torch", dtypes=tuple(dtypes), devices=tuple(devices), causal=True, mask=True,
        gqa=True, grad=grad, available=available, on_request=True,
        description=description or f"transformers attention function {label} ({mask_kind} mask)")


def _layer_classes(model_type: str) -> tuple[Any, Any, Any]:
    """(config class, attention class, rotary embedding class) of a transformers model family."""
    import importlib

    module = importlib.import_module(f"transformers.models.{model_type}.modeling_{model_type}")
    prefix = {"llama": "Llama", "mistral": "Mistral", "qwen2": "Qwen2"}[model_type]
    config = importlib.import_module(f"transformers.models.{model_type}.configuration_{model_type}")
    return (getattr(config, f"{prefix}Config"), getattr(module, f"{prefix}Attention"),
            getattr(module, f"{prefix}RotaryEmbedding"))


PROJECTION_BIASES = {"llama": "as the config's attention_bias", "mistral": "none", "qwen2": "on q, k and v only"}
"""Which projections of each family's attention layer carry biases: a case's biases must fit them."""


def _load(linear: torch.nn.Linear, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
    with torch.no_grad():
        linear.weight.copy_(weight)
        if linear.bias is not None:
            linear.bias.copy_(bias if bias is not None else torch.zeros_like(linear.bias))


def attention_layer(*, name: str, model_type: str = "llama", attn_implementation: str = "sdpa",
                    dtypes: Sequence[str] = ("float32", "float64")) -> Implementation:
    """A module implementation: transformers' ``<Family>Attention`` built from a config made to each case."""

    def module(x: torch.Tensor, *, heads: int, weights: Any, mask: Any = None, causal: bool = False,
               rope: str | None = None, kv_heads: int | None = None, past_key: torch.Tensor | None = None,
               past_value: torch.Tensor | None = None) -> Callable[[], torch.Tensor]:
        from transformers.cache_utils import DynamicCache

        config_class, attention_class, rotary_class = _layer_classes(model_type)
        b, t, d_model = x.shape
        head_dim, kv_heads = d_model // heads, kv_heads or heads
        config = config_class(hidden_size=d_model, num_attention_heads=heads, num_key_value_heads=kv_heads,
                              head_dim=head_dim, rope_theta=10000.0, attention_bias=weights.in_proj_bias is not None,
                              max_position_embeddings=1 << 20)
        config._attn_implementation = attn_implementation
        layer = attention_class(config, layer_idx=0).to(dtype=x.dtype, device=x.device).eval()
        layer.is_causal = causal
        w, bias = weights.in_proj_weight, weights.in_proj_bias
        kv = kv_heads * head_dim
        parts = ((layer.q_proj, 0, d_model), (layer.k_proj, d_model, d_model + kv), (layer.v_proj, d_model + kv, d_model + 2 * kv))
        for linear, start, end in parts:
            _load(linear, w[start:end], None if bias is None else bias[start:end])
        _load(layer.o_proj, weights.out_proj_weight, weights.out_proj_bias)
        past = 0 if past_key is None else past_key.shape[2]
        positions = torch.arange(past, past + t, device=x.device)
        if rope:
            cos, sin = rotary_class(config, device=x.device)(x, positions[None].expand(b, -1))
        else:  # no rotation: cos 1, sin 0
            cos = torch.ones(b, t, head_dim, dtype=x.dtype, device=x.device)
            sin = torch.zeros_like(cos)
        keys_mask = None if mask is None else mask.reshape(b, 1, 1, past + t)
        allowed = _allowed(t, past + t, causal, keys_mask, x.device, past)
        if allowed is None:
            allowed = torch.ones(t, past + t, dtype=torch.bool, device=x.device)  # no causal default here
        attention_mask = four_d(allowed, "additive" if attn_implementation == "eager" else "bool", x.dtype)

        def run() -> torch.Tensor:
            cache = None
            if past_key is not None and past_value is not None:
                cache = DynamicCache()
                cache.update(past_key, past_value, 0)
            with torch.no_grad():
                out: torch.Tensor = layer(x, (cos, sin), attention_mask, past_key_values=cache,
                                          cache_position=positions)[0]
            return out

        return run

    if model_type not in PROJECTION_BIASES:
        raise ValueError(f"model_type {model_type!r}: choose one of {sorted(PROJECTION_BIASES)}")

    def available(case: Any) -> str | None:
        if getattr(case, "proj_bias", False) and model_type != "llama":
            return (f"{model_type}'s attention layer has projection biases {PROJECTION_BIASES[model_type]}; "
                    "this case has biases on every projection")
        return transformers_missing()

    module.__name__ = module.__qualname__ = name
    return make_implementation(
        name, module, backend="torch", dtypes=tuple(dtypes), kind="module", causal=True, mask=True, gqa=True,
        prepare=True, available=available, on_request=True,
        layers=("mha",), rope=("rotate_half",), kv_cache=True,
        description=f"transformers {model_type} attention layer built from its config ({attn_implementation})")
