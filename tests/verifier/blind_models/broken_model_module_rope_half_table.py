"""BROKEN: the RoPE table (positions, frequencies, angles, cos, sin) is computed in the layer's own dtype. In
bfloat16 positions past 256 are rounded to a multiple of 2 (past 512, of 4) and the angles with them; in float16 an
angle near 500 is off by up to 0.25 rad. Exact in float32/float64 and for short sequences."""
import sys
from pathlib import Path

from harness import register_module

sys.path.insert(0, str(Path(__file__).parent))
from _module_model import mha


@register_module("broken_model_module_rope_half_table", backend="torch", dtypes=("float32", "bfloat16", "float16"),
                 causal=True, mask=True, bias=True, layers=("mha",), rope=("rotate_half", "interleaved"))
def broken_model_module_rope_half_table(x, *, heads, weights, mask=None, causal=False, bias=None, rope=None):
    return mha(x, heads, weights, mask, causal, bias, rope, x.dtype)
