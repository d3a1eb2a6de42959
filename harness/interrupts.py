"""Ctrl-C that always stops: a SIGINT is remembered even when library code swallows it.

Python turns SIGINT into ``KeyboardInterrupt`` wherever the main thread happens to be. Some
C++ start-up code catches every Python exception it meets: importing torch imports NumPy
from C++ and discards a ``KeyboardInterrupt`` raised meanwhile, so a Ctrl-C in the first
second of a command was lost and the whole run went on. :func:`install` (the very first
thing ``attnbench`` does) sets a handler that records the signal before raising, and
:func:`check` raises again at the points where a swallowed interrupt must not be ignored:
after heavy imports, after loading plugins, and when a command returns.
"""

from __future__ import annotations

import signal
import types

_received = False


def _handler(signum: int, frame: types.FrameType | None) -> None:
    global _received
    _received = True
    raise KeyboardInterrupt


def install() -> None:
    """Route SIGINT through the recording handler (main thread only, as signal handlers are)."""
    global _received
    _received = False
    signal.signal(signal.SIGINT, _handler)


def received() -> bool:
    """Whether a SIGINT arrived since :func:`install`, even one that library code swallowed."""
    return _received


def check() -> None:
    """Raise ``KeyboardInterrupt`` if a SIGINT arrived and was swallowed on its way."""
    if _received:
        raise KeyboardInterrupt


def import_torch() -> types.ModuleType:
    """``import torch``, then :func:`check`: torch's C++ set-up swallows a Ctrl-C that lands inside it."""
    import torch

    check()
    return torch
