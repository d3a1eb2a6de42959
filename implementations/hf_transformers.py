"""Hugging Face transformers' attention, run where named (``--only``): its SDPA and eager attention functions
and Llama's attention layer built from a config (:mod:`harness.adapters.transformers_attention`).

Unavailable, with the reason, where transformers is not installed (``pip install 'attnbench[transformers]'``).
"""

from __future__ import annotations

from typing import Any

from harness.adapters.transformers_attention import attention_function, attention_layer


def _llama_eager(*args: Any, **kwargs: Any) -> Any:
    """transformers' Llama ``eager_attention_forward``, imported when first called."""
    from transformers.models.llama.modeling_llama import eager_attention_forward

    return eager_attention_forward(*args, **kwargs)


hf_sdpa = attention_function("sdpa", name="hf_sdpa", mask_kind="bool",
                             description="transformers' sdpa_attention_forward (ALL_ATTENTION_FUNCTIONS['sdpa'])")
hf_eager = attention_function(_llama_eager, name="hf_eager", mask_kind="additive", dtypes=("float32",),
                              description="transformers' Llama eager_attention_forward (additive mask)")
hf_llama_attention = attention_layer(name="hf_llama_attention", model_type="llama", attn_implementation="sdpa",
                                     dtypes=("float32",))
