"""BROKEN: computes its own ALiBi slopes as 2^(-8 i / H) for every head count (the power-of-two formula). Right for
4, 8, 16 heads; for 6, 12 or 20 heads most slopes differ from the reference code's (the closest power of two's
slopes, then every other slope of the next power)"""
import sys
from pathlib import Path

import torch

from harness import register_module

sys.path.insert(0, str(Path(__file__).parent))
from _alibi_model import geometric_slopes, mha


@register_module("broken_model_module_alibi_geometric_slopes", backend="torch", dtypes=("float32", "float64", "bfloat16"),
                 causal=True, mask=True, layers=("mha",), positional_bias=("alibi",))
def broken_model_module_alibi_geometric_slopes(x, *, heads, weights, mask=None, causal=False, positional_bias=None):
    slopes = geometric_slopes(heads) if positional_bias == "alibi" else torch.zeros(heads)  # no bias asked: none
    return mha(x, heads, weights, mask, causal, slopes)
