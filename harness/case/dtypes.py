"""The floating-point types a case may ask for, written once: names, sizes, precision, array types.

Every layer reads its dtype vocabulary from here (cases, the plugin contract, FLOPs and bytes, the
report's loader, the sweep planner), so adding a type is one row. This module imports nothing from
the harness and no array library at import time: torch and NumPy dtypes are looked up on demand.

Two tables: the types a case computes in (q, the output, a KV cache beside them), and the FP8 types a KV
cache may only be *stored* in, each with float32 scales (:mod:`harness.case.quantized`): no kernel computes
in FP8 on the CPU, so those are never a case's ``dtype``.
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
    """NumPy has the type (it has no bfloat16, and no FP8 type)."""
    largest: float = float("inf")
    """The largest finite value (kept for the storage-only types, whose scales are sized by it)."""

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

FP8_TABLE: dict[str, DType] = {t.name: t for t in (
    DType("float8_e4m3fn", 1, 2.0 ** -3, False, 448.0),
    DType("float8_e5m2", 1, 2.0 ** -2, False, 57344.0),
)}
"""KV-cache storage types only (OCP FP8: 4 exponent bits and 3 mantissa bits with no infinity, the type vLLM and
FlashInfer store caches in; 5 and 2, IEEE-like): a cache is stored in one of them with float32 scales."""
FP8_DTYPES: tuple[str, ...] = tuple(FP8_TABLE)
"""The names an FP8 ``kv_dtype`` and ``register(kv_dtypes=...)`` accept."""
KV_DTYPES: tuple[str, ...] = DTYPES + FP8_DTYPES
"""Every type a KV cache may be stored in."""


def itemsize(name: str) -> int:
    """Bytes per element of the type called ``name`` (a storage-only FP8 type too)."""
    return (TABLE.get(name) or FP8_TABLE[name]).itemsize
