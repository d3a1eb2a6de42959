"""Progress on long work: a bar with ETA on a terminal; on a pipe, only the lines asked for.

Writes to stderr, so that stdout stays the command's answer (a table, or JSON with --json).
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """``advance(label)`` after each unit of work; ``line(text)`` for a lasting message."""

    def __init__(self, total: int, *, title: str = "", stream: TextIO | None = None, enabled: bool = True) -> None:
        self.total = max(total, 1)
        self.done = 0
        self.title = title
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.interactive = enabled and self.stream.isatty()
        self.started = time.monotonic()
        self._width = 0

    def advance(self, label: str = "", count: int = 1) -> None:
        self.done = min(self.done + count, self.total)
        if self.interactive:
            self._draw(label)

    def line(self, text: str) -> None:
        """A message that stays (on a terminal it is printed above the bar)."""
        if not self.enabled:
            return
        self._clear()
        print(text, file=self.stream, flush=True)

    def close(self) -> None:
        self._clear()

    def eta_seconds(self) -> float | None:
        if self.done == 0:
            return None
        elapsed = time.monotonic() - self.started
        return elapsed / self.done * (self.total - self.done)

    def _draw(self, label: str) -> None:
        fraction = self.done / self.total
        bar = "#" * int(fraction * 24)
        eta = self.eta_seconds()
        eta_text = "" if eta is None else f" ETA {eta:4.0f}s"
        text = f"{self.title} [{bar:<24}] {self.done}/{self.total}{eta_text} {label}"[:120]
        self.stream.write("\r" + text.ljust(self._width))
        self.stream.flush()
        self._width = len(text)

    def _clear(self) -> None:
        if self.interactive and self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self.stream.flush()
            self._width = 0

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
