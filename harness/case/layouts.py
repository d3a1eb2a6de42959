"""Memory layouts of the arrays the harness hands an implementation: the same values, other strides.

A kernel that reads ``data_ptr()`` with the strides it assumes, rather than the ones it is given, is
right on contiguous inputs and wrong on every other view. Every array that crosses the boundary
can arrive in each layout (:data:`harness.case.attention.LAYOUTS`): q, k and v by ``case.layout``; the mask,
the bias, the upstream gradient of a backward, cache lengths, block tables and the cumulative
sequence lengths of packed sequences by ``case.aux_layout``.

- ``contiguous``: row-major, offset 0.
- ``transposed``: the last two dimensions stored swapped (q, k, v: (B, T, H, d) storage viewed as
  (B, H, T, d), as a fused QKV projection produces); a 1-D array has no second axis, so it is strided.
- ``strided``: every other element of the last dimension of a buffer twice as wide.
- ``offset``: a contiguous view starting :data:`OFFSET` elements into its buffer.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

OFFSET = 37
"""Elements before an ``offset`` view's first one: odd, so no alignment assumption survives it."""


def torch_layout(x: torch.Tensor, layout: str, swap: tuple[int, int] = (-1, -2)) -> torch.Tensor:
    """Same values as ``x``, in ``layout``; ``transposed`` stores dimensions ``swap`` swapped."""
    if layout == "offset":
        buffer = torch.zeros(OFFSET + x.numel(), dtype=x.dtype, device=x.device)
        view = buffer[OFFSET:].view(x.shape)
        view.copy_(x)
        return view
    if layout == "transposed" and x.dim() >= 2:
        a, b = swap
        return x.transpose(a, b).contiguous().transpose(a, b)
    if layout in ("strided", "transposed"):
        wide = torch.zeros(*x.shape[:-1], 2 * x.shape[-1], dtype=x.dtype, device=x.device)
        wide[..., ::2] = x
        return wide[..., ::2]
    return x.contiguous()


def numpy_layout(x: np.ndarray, layout: str, swap: tuple[int, int] = (-1, -2)) -> np.ndarray:
    """:func:`torch_layout` for NumPy arrays."""
    x = np.asarray(x)
    if layout == "offset":
        buffer = np.zeros(OFFSET + x.size, dtype=x.dtype)
        view = buffer[OFFSET:].reshape(x.shape)
        view[...] = x
        return view
    if layout == "transposed" and x.ndim >= 2:
        a, b = swap
        moved: np.ndarray = np.ascontiguousarray(np.swapaxes(x, a, b)).swapaxes(a, b)
        return moved
    if layout in ("strided", "transposed"):
        wide = np.zeros(x.shape[:-1] + (2 * x.shape[-1],), dtype=x.dtype)
        wide[..., ::2] = x
        return wide[..., ::2]
    return np.ascontiguousarray(x)


def in_layout(x: Any, layout: str, swap: tuple[int, int] = (-1, -2)) -> Any:
    """A torch tensor or NumPy array (None stays None) in ``layout``."""
    if x is None or layout == "contiguous" and not isinstance(x, (torch.Tensor, np.ndarray)):
        return x
    if isinstance(x, torch.Tensor):
        return torch_layout(x, layout, swap)
    return numpy_layout(x, layout, swap)


QKV_SWAP = (1, 2)
"""q, k and v's ``transposed`` layout: (B, T, H, d) storage, heads and positions swapped."""
