"""The devices a case may run on and an implementation may declare (``register(devices=...)``)."""

from __future__ import annotations

DEVICES: tuple[str, ...] = ("cpu", "cuda")
"""cpu: always present; cuda: a case on it is skipped, with the reason, where torch sees no CUDA device.

What holds only on cuda (events after a device-wide synchronize, the L2 flush, the allocator's peak memory, the
GPU-sized GEMM peak, the subset of integrity checks a CUDA cell gets) is listed in docs/benchmarking.md and
docs/integrity.md, "On a GPU"; ``scripts/gpu_check.sh`` runs each of those paths on a GPU machine."""
