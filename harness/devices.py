"""The devices a case may run on and an implementation may declare (``register(devices=...)``)."""

from __future__ import annotations

DEVICES: tuple[str, ...] = ("cpu", "cuda")
"""cpu: always present; cuda: a case on it is skipped, with the reason, where torch sees no CUDA device."""
