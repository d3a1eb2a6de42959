"""Process state a plugin may change while it imports, kept from reaching anything but that plugin.

A plugin module is free to set up its process at import (``np.seterr``, ``torch.set_default_dtype``,
thread counts, environment variables): in a worker, only the implementation that plugin declares
runs (:func:`harness.contract.discovery.load_source`). The command's own process, though, imports every
plugin to read their declarations, and it starts the workers, which inherit its environment.
:func:`kept` puts that state back after each plugin's import there, and :func:`stdout_to_stderr`
sends what a plugin writes to file descriptor 1 (``os.write(1, ...)``, C code) to stderr, since
stdout is the command's answer (a table, JSON).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any, NoReturn, TypedDict


class _State(TypedDict, total=False):
    """What a plugin may change in its process: the environment, NumPy's error mode, torch's defaults."""

    environ: dict[str, str]
    numpy: dict[str, str]
    torch: tuple[Any, int]
    """(default dtype, threads)."""


def _snapshot() -> _State:
    state: _State = {"environ": dict(os.environ)}
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        state["numpy"] = numpy.geterr()
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "get_default_dtype"):  # not a half-imported torch
        state["torch"] = (torch.get_default_dtype(), torch.get_num_threads())
    return state


def _restore(state: _State) -> None:
    if dict(os.environ) != state["environ"]:
        os.environ.clear()
        os.environ.update(state["environ"])
    if "numpy" in state:
        sys.modules["numpy"].seterr(**state["numpy"])
    if "torch" in state:
        torch = sys.modules["torch"]
        dtype, threads = state["torch"]
        if torch.get_default_dtype() != dtype:
            torch.set_default_dtype(dtype)
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)


@contextlib.contextmanager
def kept() -> Iterator[None]:
    """Restore, on leaving, the environment, NumPy's error mode, and torch's default dtype and thread
    count as they were on entering (NumPy's and torch's when they were imported before the block)."""
    state = _snapshot()
    try:
        yield
    finally:
        _restore(state)


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """``print`` and raw writes to file descriptor 1 go to stderr inside the block."""
    saved = None
    try:
        sys.stdout.flush()
        saved = os.dup(1)
        os.dup2(2, 1)
    except (OSError, ValueError, AttributeError):  # no real fd 1 or 2 (closed, or a stream in memory)
        if saved is not None:
            os.close(saved)
            saved = None
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        if saved is not None:
            os.dup2(saved, 1)
            os.close(saved)


class RefusedExit(SystemExit):
    """A plugin called ``os._exit`` where it runs in the command's own process (its import, a pytest call)."""


@contextlib.contextmanager
def exits_refused(where: str) -> Iterator[None]:
    """Inside the block ``os._exit(code)`` raises :class:`RefusedExit` instead of ending the process: a plugin
    that calls it ``where`` (while being imported, say) fails with a message, never ends the command with its
    own status (``os._exit(0)`` would be a silent green exit)."""
    real = os._exit

    def refuse(status: int) -> NoReturn:
        raise RefusedExit(f"it called os._exit({status!r}) {where}; a plugin must not exit")

    os._exit = refuse
    try:
        yield
    finally:
        os._exit = real
