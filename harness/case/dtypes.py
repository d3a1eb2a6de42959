"""The floating-point types a case may ask for, written once: names, sizes, precision, array types.

Every layer reads its dtype vocabulary from here (cases, the plugin contract, FLOPs and bytes, the
report's loader, the sweep planner), so adding a type is one row. This module imports nothing from
the harness and no array library at import time: torch and NumPy dtypes are looked up on demand.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class DType:
    """One floating-point type as the harness knows it."""

    name: str
    """The case's spelling, also torch's and NumPy's attribute name (``torch.bfloat16``)."""
    itemsize: int
    """Bytes per element."""
    eps: float
    """Machine epsilon, 2^-(mantissa bits): the unit of rounding the tolerance rule scales."""
    numpy: bool
    """NumPy has the type (it has no bfloat16)."""

    def torch(self) -> Any:
        """The ``torch.dtype`` (imports torch)."""
        import torch

        return getattr(torch, self.name)

    def numpy_dtype(self) -> Any:
        """The ``numpy.dtype``; a ``ValueError`` for a type NumPy lacks."""
        if not self.numpy:
            raise ValueError(f"NumPy has no {self.name}")
        import numpy as np

        return np.dtype(self.name)


TABLE: dict[str, DType] = {t.name: t for t in (
    DType("float64", 8, 2.0 ** -52, True),
    DType("float32", 4, 2.0 ** -23, True),
    DType("float16", 2, 2.0 ** -10, True),
    DType("bfloat16", 2, 2.0 ** -7, False),
)}
"""Every type, widest first."""

DTYPES: tuple[str, ...] = tuple(TABLE)
"""The names a case's ``dtype`` and ``register(dtypes=...)`` accept."""
NUMPY_DTYPES: tuple[str, ...] = tuple(name for name, t in TABLE.items() if t.numpy)
"""The names a ``backend='numpy'`` plugin may declare."""
ITEMSIZE: dict[str, int] = {name: t.itemsize for name, t in TABLE.items()}
"""Bytes per element by name."""
ORACLE_DTYPE = "float64"
"""The oracle computes in this type, whatever the case's."""


def itemsize(name: str) -> int:
    """Bytes per element of the type called ``name``."""
    return TABLE[name].itemsize
