"""The standard streams of the command and of its workers, whatever the caller left them as.

A command started with a standard stream closed (``attnbench verify >&-``, ``2>&-``, a daemon with no
stdin) has a free descriptor 0, 1 or 2 that the next file or pipe it opens would take: its JSON would land in
a result file, a worker's pipe on what a library believes is stderr. :func:`fill_standard_fds` puts
``/dev/null`` on each closed one first, so a closed stream is a silent sink, and Python's ``sys.stdout`` and
``sys.stderr`` (None then) write to it. :func:`forgiving_encoding` lets a stream whose encoding cannot spell a
character (``PYTHONIOENCODING=ascii``) write an escape instead of failing after the run.

Text a worker sends back (a plugin's exception message, its traceback) is cut to :data:`MESSAGE_LIMIT_BYTES`
by :func:`clip` before it leaves the worker, keeping its head and its tail.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import sys
from typing import Any

MESSAGE_LIMIT_BYTES = 8192
"""The most of one text a worker sends back (a reason, a traceback): its first and last 4 KiB, with how many
bytes were cut between them. A plugin's 50 MB exception message costs a result file 8 KiB, not 50 MB."""


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def fill_standard_fds() -> None:
    """``/dev/null`` on each of descriptors 0, 1 and 2 that is closed, and a Python stream on the two outputs
    where there is none; in order, so that opening ``/dev/null`` never takes a lower descriptor by accident."""
    for fd in (0, 1, 2):
        if _is_open(fd):
            continue
        with contextlib.suppress(OSError):
            null = os.open(os.devnull, os.O_RDONLY if fd == 0 else os.O_WRONLY)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
    if sys.stdout is None:
        sys.stdout = _text_stream(1)
    if sys.stderr is None:
        sys.stderr = _text_stream(2)


def _text_stream(fd: int) -> io.TextIOWrapper:
    return open(fd, "w", encoding="utf-8", errors="backslashreplace", buffering=1, closefd=False)


def forgiving_encoding() -> None:
    """stdout and stderr write ``\\xd7`` for a character their encoding lacks, instead of raising."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            with contextlib.suppress(ValueError, OSError):
                reconfigure(errors="backslashreplace")


def stdin_from_devnull() -> None:
    """In a worker: descriptor 0 and ``sys.stdin`` read ``/dev/null``, never the command's input."""
    with contextlib.suppress(OSError):
        null = os.open(os.devnull, os.O_RDONLY)
        if null != 0:
            os.dup2(null, 0)
            os.close(null)
    with contextlib.suppress(OSError, ValueError):
        sys.stdin = open(0, encoding="utf-8", closefd=False)


def clip(text: str, limit: int = MESSAGE_LIMIT_BYTES) -> str:
    """``text`` when it is at most ``limit`` bytes of UTF-8; else its head and tail around ``… N bytes cut …``."""
    if len(text) <= limit // 4:  # at most 4 bytes a character: short for sure
        return text
    raw = text.encode("utf-8", "surrogatepass")
    if len(raw) <= limit:
        return text
    half = limit // 2
    head = raw[:half].decode("utf-8", "ignore")
    tail = raw[-half:].decode("utf-8", "ignore")
    return f"{head} … {len(raw) - 2 * half} bytes cut … {tail}"


def clip_strings(value: Any, depth: int = 0) -> Any:
    """``value`` with every string in it clipped (:func:`clip`): through tuples, lists, dicts and dataclasses,
    a few levels deep. What holds no long string is returned as it is (the same object)."""
    if isinstance(value, str):
        return clip(value)
    if depth > 6:
        return value
    try:
        if isinstance(value, (list, tuple)):
            items = [clip_strings(v, depth + 1) for v in value]
            if all(a is b for a, b in zip(items, value)):
                return value
            if isinstance(value, list):
                return items
            return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)
        if isinstance(value, dict):
            new = {k: clip_strings(v, depth + 1) for k, v in value.items()}
            return value if all(new[k] is v for k, v in value.items()) else type(value)(new)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            changes = {}
            for f in dataclasses.fields(value):
                if f.init:
                    old = getattr(value, f.name)
                    new_value = clip_strings(old, depth + 1)
                    if new_value is not old:
                        changes[f.name] = new_value
            return dataclasses.replace(value, **changes) if changes else value
    except Exception:  # noqa: BLE001 - a value that cannot be rebuilt goes back as it is; the parent's cap still holds
        return value
    return value
