"""HuggingFace transformers' attention functions, as they are: only their conventions are declared.

``pip install 'attnbench[real]'`` (transformers 4.57.1, Apache-2.0). Each function takes the layer it
belongs to as ``module`` (it reads ``num_key_value_groups``, ``training`` and, for gpt-oss, ``sinks``), q, k
and v as (B, H, T, d), and returns ``(out, weights)`` with ``out`` as (B, T, H, d).
"""

from __future__ import annotations

import torch

from harness import Conventions, register

try:
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.models.gemma2.modeling_gemma2 import eager_attention_forward as gemma2_eager
    from transformers.models.gpt_oss.modeling_gpt_oss import eager_attention_forward as gpt_oss_eager
    from transformers.models.llama.modeling_llama import eager_attention_forward as llama_eager
    MISSING = None
except ImportError as exc:  # the plugin still loads, and says why it cannot run
    MISSING = f"needs transformers ({exc}): pip install 'attnbench[real]'"

DTYPES = ("float32", "float64", "bfloat16")
EAGER_DTYPES = ("float32", "bfloat16")
"""The eager functions compute the softmax in float32 (``softmax(..., dtype=torch.float32)``) whatever q's dtype:
with float64 inputs they are float32-accurate, which verify reports as a failure (a finding, not a convention)."""


def installed(case: object) -> str | None:
    return MISSING


class Layer(torch.nn.Module):
    """What HF passes as ``module``: the attributes its attention functions read."""

    def __init__(self, q: torch.Tensor, k: torch.Tensor, sinks: torch.Tensor | None = None) -> None:
        super().__init__()
        self.num_key_value_groups = q.shape[1] // k.shape[1]
        self.head_dim = q.shape[-1]
        self.is_causal = False
        self.train(False)
        if sinks is not None:
            self.sinks = sinks


@register("declared_hf_sdpa", backend="torch", dtypes=DTYPES, causal=True, mask=True, gqa=True, grad=True, value_dim=True,
          available=installed, conventions=Conventions(out_layout="BTHD", returns="out_aux", causal_with_mask=False),
          description="transformers' sdpa_attention_forward")
def declared_hf_sdpa(q, k, v, *, causal=False, mask=None, scale=None):
    return sdpa_attention_forward(Layer(q, k), q, k, v, mask, scaling=scale, is_causal=causal)


EAGER = Conventions(out_layout="BTHD", returns="out_aux", takes_causal=False, mask_kind="additive", empty_row="mean_v")
"""HF's eager functions: causal masking arrives in the additive mask HF builds (0 / finfo.min), so a row with
no allowed key gets the mean of V."""


@register("declared_hf_llama_eager", backend="torch", dtypes=EAGER_DTYPES, causal=True, mask=True, gqa=True, grad=True,
          value_dim=True, available=installed, conventions=EAGER, description="transformers' Llama eager_attention_forward")
def declared_hf_llama_eager(q, k, v, *, mask=None, scale=None):
    return llama_eager(Layer(q, k), q, k, v, mask, scaling=q.shape[-1] ** -0.5 if scale is None else scale)


@register("declared_hf_gpt_oss_eager", backend="torch", dtypes=EAGER_DTYPES, causal=True, mask=True, gqa=True, grad=True,
          sinks=True, available=installed, conventions=EAGER, description="transformers' gpt-oss eager_attention_forward (sinks)")
def declared_hf_gpt_oss_eager(q, k, v, *, mask=None, scale=None, sinks=None):
    layer = Layer(q, k, sinks if sinks is not None else torch.full((q.shape[1],), float("-inf"), dtype=q.dtype))
    return gpt_oss_eager(layer, q, k, v, mask, scaling=q.shape[-1] ** -0.5 if scale is None else scale)


@register("declared_hf_gemma2_eager", backend="torch", dtypes=EAGER_DTYPES, causal=True, mask=True, gqa=True, grad=True,
          softcap=True, available=installed, conventions=EAGER, description="transformers' Gemma 2 eager_attention_forward (soft-cap)")
def declared_hf_gemma2_eager(q, k, v, *, mask=None, scale=None, softcap=None):
    return gemma2_eager(Layer(q, k), q, k, v, mask, scaling=scale, softcap=softcap)
