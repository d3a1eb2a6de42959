"""What crosses the boundary between the harness and an implementation, and what a call may touch.

A call may read its arguments and allocate its result; it may not write to anything it did not
allocate. :class:`Watch` copies every array an implementation receives (q, k, v, the mask, the bias,
cache lengths, block tables, cumulative lengths, a dense mask the harness folded a structure into,
the upstream gradient of a backward) together with the *whole buffer* behind each: a strided or
offset view's neighbours belong to the caller too (a kernel that writes a padded row, or assumes
contiguity when storing, writes there). After the call :meth:`Watch.problem` names what changed.

:func:`shares_storage` tells whether two results overlap in memory: results handed back by two
calls must not, or the second call overwrites what the caller holds of the first.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch


def _root(x: np.ndarray) -> np.ndarray:
    while isinstance(x.base, np.ndarray):
        x = x.base
    return x


def _whole_buffer(x: Any) -> Any:
    """A copy of every byte of the buffer behind ``x`` (not only the elements its view shows)."""
    if isinstance(x, torch.Tensor):
        storage = x.untyped_storage()
        return torch.empty(0, dtype=torch.uint8, device=x.device).set_(storage).clone()
    return np.array(_root(x), copy=True)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        if a.dtype.is_floating_point and a.element_size() == 1:  # FP8: torch compares no FP8 values; bytes it does
            return a.shape == b.shape and torch.equal(a.view(torch.uint8), b.view(torch.uint8))
        return a.shape == b.shape and torch.equal(a, b)
    return a.shape == b.shape and np.array_equal(a, b, equal_nan=a.dtype.kind in "fc")


def _copy(x: Any) -> Any:
    return x.clone() if isinstance(x, torch.Tensor) else np.array(x, copy=True)


@dataclass
class Watch:
    """Copies of named arrays (and of the buffers behind them) taken before a call."""

    arrays: dict[str, object]
    _before: dict[str, tuple[Any, Any]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.arrays = {n: x for n, x in self.arrays.items() if isinstance(x, (torch.Tensor, np.ndarray))}
        self._before = {n: (_copy(x), _whole_buffer(x)) for n, x in self.arrays.items()}

    def problem(self) -> str | None:
        """What the call changed: an argument's values, or the buffer around a view; None when nothing."""
        changed = [n for n, x in self.arrays.items() if not _same(x, self._before[n][0])]
        if changed:
            return f"the call modified its input(s) {', '.join(changed)}"
        around = [n for n, x in self.arrays.items() if not _same(_whole_buffer(x), self._before[n][1])]
        if around:
            return (f"the call wrote into the buffer behind input(s) {', '.join(around)}, outside the view it was "
                    f"given (a strided or offset view's neighbours belong to the caller)")
        return None


def arguments(q: Any, k: Any, v: Any, kwargs: dict[str, object]) -> dict[str, object]:
    """Every array of one call by the name it is passed as."""
    return {"q": q, "k": k, "v": v, **{n: x for n, x in kwargs.items() if isinstance(x, (torch.Tensor, np.ndarray))}}


def _span(x: torch.Tensor) -> tuple[int, int] | None:
    """[first byte, last byte] a tensor's elements occupy, or None when it is empty."""
    if x.numel() == 0:
        return None
    start = x.data_ptr()
    extent = sum((n - 1) * s for n, s in zip(x.shape, x.stride())) * x.element_size()
    return start, start + extent + x.element_size() - 1


def shares_storage(a: Any, b: Any) -> bool:
    """Whether results ``a`` and ``b`` overlap in memory (the same buffer, overlapping byte ranges)."""
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if a.device != b.device or a.untyped_storage().data_ptr() != b.untyped_storage().data_ptr():
            return False
    elif isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        return bool(np.shares_memory(a, b))
    else:
        return False
    sa, sb = _span(a), _span(b)
    return sa is not None and sb is not None and sa[0] <= sb[1] and sb[0] <= sa[1]
