"""Module-level verification: multi-head attention with projections and Transformer encoder layers.

A module plugin is registered with :func:`harness.register_module`; it is
called as ``fn(x, *, heads, weights, mask=None, causal=False[, bias][, rope])`` with
X (B, T, d_model) and weights in PyTorch's own layout (:mod:`harness.modules.weights`),
and returns Y (B, T, d_model). See docs/modules.md.
"""

from harness.modules.cases import LAYERS, ModuleCase
from harness.modules.weights import EncoderLayerWeights, ModuleInputs, MultiheadWeights, make_module_inputs

__all__ = ["LAYERS", "ModuleCase", "MultiheadWeights", "EncoderLayerWeights", "ModuleInputs",
           "make_module_inputs"]
