"""lucidrains' memory-efficient-attention-pytorch (MIT): its two functions, as they are.

``pip install 'attnbench[real]'`` (memory-efficient-attention-pytorch 0.1.6). Neither takes a scale (both use
1/sqrt(d)); a masked logit is ``-finfo.max``, so a row with no allowed key gets the mean of V (in the chunked
function, of the keys of the chunks it visits: unspecified). They differ in
causal alignment: ``attention`` aligns bottom-right (``triu(j - i + 1)``), ``memory_efficient_attention``
top-left, and the latter takes (B, Tk) key-padding masks only. ``memory_efficient_attention`` checkpoints
each chunk with re-entrant ``torch.utils.checkpoint``: its gradients need ``.backward()``.
"""

from __future__ import annotations

from harness import Conventions, register

try:
    from memory_efficient_attention_pytorch.memory_efficient_attention import attention, memory_efficient_attention
    MISSING = None
except ImportError as exc:
    MISSING = f"needs memory-efficient-attention-pytorch ({exc}): pip install 'attnbench[real]'"


def installed(case: object) -> str | None:
    return MISSING


@register("lucidrains_attention", backend="torch", dtypes=("float32", "float64"), causal=True, mask=True, grad=True,
          value_dim=True, available=installed,
          conventions=Conventions(takes_scale=False, causal_align="bottom_right", empty_row="mean_v"),
          description="memory_efficient_attention_pytorch.attention")
def lucidrains_attention(q, k, v, *, causal=False, mask=None):
    return attention(q, k, v, mask=mask, causal=causal)


@register("lucidrains_memeff", backend="torch", dtypes=("float32", "float64"), causal=True, mask=True, grad=True,
          value_dim=True, available=installed,
          conventions=Conventions(takes_scale=False, mask_kind="key_padding", empty_row="unspecified"),
          description="memory_efficient_attention_pytorch.memory_efficient_attention (chunked, checkpointed)")
def lucidrains_memeff(q, k, v, *, causal=False, mask=None):
    return memory_efficient_attention(q, k, v, mask=mask, causal=causal, q_bucket_size=16, k_bucket_size=32)
