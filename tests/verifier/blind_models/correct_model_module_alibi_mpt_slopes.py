"""CORRECT, unusual: computes its own ALiBi slopes as MPT does (the next power of two's slopes, odd positions then
even, cut to the head count), a different formula with the reference code's values for every head count."""
import sys
from pathlib import Path

import torch

from harness import register_module

sys.path.insert(0, str(Path(__file__).parent))
from _alibi_model import mha, mpt_slopes


@register_module("correct_model_module_alibi_mpt_slopes", backend="torch", dtypes=("float32", "float64", "bfloat16"),
                 causal=True, mask=True, layers=("mha",), positional_bias=("alibi",))
def correct_model_module_alibi_mpt_slopes(x, *, heads, weights, mask=None, causal=False, positional_bias=None):
    slopes = mpt_slopes(heads) if positional_bias == "alibi" else torch.zeros(heads)  # no bias asked: none
    return mha(x, heads, weights, mask, causal, slopes)
