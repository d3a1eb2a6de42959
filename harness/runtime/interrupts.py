"""Ctrl-C that always stops: a SIGINT (or SIGTERM, SIGHUP) is remembered even when library code swallows it.

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
_signal: int | None = None
STOPPING_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))
"""Ctrl-C, what ``timeout``, ``kill`` and a CI cancellation send, and a closed terminal: each stops a command
the same way (the cells measured kept, how to finish said, locks and temporary files removed)."""


def _handler(signum: int, frame: types.FrameType | None) -> None:
    global _received, _signal
    _received = True
    _signal = signum
    raise KeyboardInterrupt


def install() -> None:
    """Route SIGINT, SIGTERM and SIGHUP through the recording handler (main thread only, as signal handlers are)."""
    global _received, _signal
    _received = False
    _signal = None
    for signum in STOPPING_SIGNALS:
        if signum != signal.SIGINT and signal.getsignal(signum) == signal.SIG_IGN:
            continue  # `nohup attnbench ...`: a hang-up the user asked to ignore stays ignored
        signal.signal(signum, _handler)


def exit_code() -> int:
    """The conventional status of a command stopped by the last signal received: 128 + its number
    (130 for Ctrl-C, 143 for SIGTERM, 129 for SIGHUP); 130 when the interrupt came from elsewhere."""
    return 128 + (_signal if _signal is not None else signal.SIGINT)


def signal_name() -> str | None:
    """The signal that stopped the command, SIGTERM say; None for Ctrl-C (the usual case says nothing more)."""
    if _signal is None or _signal == signal.SIGINT:
        return None
    return signal.Signals(_signal).name


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
