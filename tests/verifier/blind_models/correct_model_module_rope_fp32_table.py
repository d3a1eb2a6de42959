"""CORRECT, unusual: a bfloat16/float16 layer with its RoPE table computed in float32 (as Llama's reference code
and most inference stacks keep it) and applied in the layer's dtype; scores and softmax in float32."""
import sys
from pathlib import Path

import torch

from harness import register_module

sys.path.insert(0, str(Path(__file__).parent))
from _module_model import mha


@register_module("correct_model_module_rope_fp32_table", backend="torch", dtypes=("float32", "bfloat16", "float16"),
                 causal=True, mask=True, bias=True, layers=("mha",), rope=("rotate_half", "interleaved"))
def correct_model_module_rope_fp32_table(x, *, heads, weights, mask=None, causal=False, bias=None, rope=None):
    return mha(x, heads, weights, mask, causal, bias, rope, torch.float32)
