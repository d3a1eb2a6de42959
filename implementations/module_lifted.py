"""Built-in kernels lifted into the module suite: each inside multi-head attention with projections.

So ``attnbench verify`` shows how the textbook kernel, PyTorch's SDPA and our tiled kernel
behave inside a real layer, against ``nn.MultiheadAttention`` (see :mod:`harness.modules.lift`).
"""

from __future__ import annotations

from harness.modules.lift import lift
from implementations.numpy_naive import numpy_naive
from implementations.tiled import tiled
from implementations.torch_sdpa import torch_sdpa

numpy_naive_mha = lift(numpy_naive)
torch_sdpa_mha = lift(torch_sdpa)
tiled_mha = lift(tiled)
