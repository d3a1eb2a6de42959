"""BROKEN: computes its own ALiBi slopes from the closest power of two, but takes the extra heads' slopes as the first
H - H' slopes of 2 H' instead of every other one (a wrong interleave): for 6 heads the last slope is 2^-2, not
2^-3. Right for powers of two."""
import sys
from pathlib import Path

import torch

from harness import register_module

sys.path.insert(0, str(Path(__file__).parent))
from _alibi_model import contiguous_extra_slopes, mha


@register_module("broken_model_module_alibi_contiguous_extra", backend="torch", dtypes=("float32", "float64", "bfloat16"),
                 causal=True, mask=True, layers=("mha",), positional_bias=("alibi",))
def broken_model_module_alibi_contiguous_extra(x, *, heads, weights, mask=None, causal=False, positional_bias=None):
    slopes = contiguous_extra_slopes(heads) if positional_bias == "alibi" else torch.zeros(heads)  # no bias asked: none
    return mha(x, heads, weights, mask, causal, slopes)
