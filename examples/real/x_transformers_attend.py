"""x-transformers' ``Attend`` (MIT), with flash (torch SDPA) off and on, as it is.

``pip install 'attnbench[real]'`` (x-transformers 2.8.2). Query head h reads kv head h % Hkv
(``repeat(t, 'b kvh n d -> b (r kvh) n d')``); causal masking is aligned bottom-right
(``create_causal_mask``: ``triu(j - i + 1)``); it returns ``(out, intermediates)``.
"""

from __future__ import annotations

from harness import Conventions, register

try:
    from x_transformers.attend import Attend
    MISSING = None
except ImportError as exc:
    MISSING = f"needs x-transformers ({exc}): pip install 'attnbench[real]'"


def installed(case: object) -> str | None:
    return MISSING


ATTEND = Conventions(gqa_head_map="h%Hkv", causal_align="bottom_right", returns="out_aux")
DTYPES = ("float32", "bfloat16")
"""The softmax runs in float32 whatever q's dtype (``partial(F.softmax, dim=-1, dtype=torch.float32)``): float64
inputs get float32 accuracy, which verify reports as a failure (a finding, not a convention)."""


@register("xt_attend", backend="torch", dtypes=DTYPES, causal=True, mask=True, gqa=True, grad=True,
          value_dim=True, available=installed, conventions=ATTEND, description="x_transformers.attend.Attend(flash=False)")
def xt_attend(q, k, v, *, causal=False, mask=None, scale=None):
    return Attend(causal=causal, scale=scale, flash=False)(q, k, v, mask=mask)


@register("xt_attend_flash", backend="torch", dtypes=DTYPES, causal=True, mask=True, gqa=True, grad=True,
          value_dim=True, available=installed, conventions=ATTEND, description="x_transformers.attend.Attend(flash=True)")
def xt_attend_flash(q, k, v, *, causal=False, mask=None, scale=None):
    return Attend(causal=causal, scale=scale, flash=True)(q, k, v, mask=mask)
