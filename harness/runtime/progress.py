"""Progress on long work: tqdm's bar with an ETA on a terminal; on a pipe, only the lines asked for.

Writes to stderr, so that stdout stays the command's answer (a table, or JSON with --json). The bar is tqdm's
(pinned in pyproject; MPL-2.0 and MIT): it redraws in place, rate-limited, and clears itself when the work ends.
"""

from __future__ import annotations

import os
import sys
from typing import TextIO

from tqdm import tqdm


class Progress:
    """``advance(label)`` after each unit of work; ``line(text)`` for a lasting message."""

    def __init__(self, total: int, *, title: str = "", stream: TextIO | None = None, enabled: bool = True) -> None:
        self.total = max(total, 1)
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.interactive = enabled and self.stream.isatty()
        self._bar = tqdm(total=self.total, desc=title, file=self.stream, leave=False,
                         bar_format="{desc} {bar} {n_fmt}/{total_fmt} ETA {remaining}{postfix}", ncols=_width(self.stream),
                         disable=not self.interactive)

    @property
    def done(self) -> int:
        return int(self._bar.n)

    def advance(self, label: str = "", count: int = 1) -> None:
        count = max(0, min(count, self.total - self.done))
        if self.interactive:
            self._bar.set_postfix_str(label[:60], refresh=False)
        self._bar.update(count)
        if not self.interactive:
            self._bar.n += count  # a disabled bar counts nothing itself

    def line(self, text: str) -> None:
        """A message that stays (on a terminal it is printed above the bar)."""
        if not self.enabled:
            return
        if self.interactive:
            self._bar.write(text, file=self.stream)
        else:
            print(text, file=self.stream, flush=True)

    def close(self) -> None:
        self._bar.close()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _width(stream: TextIO) -> int:
    """The terminal's columns (at most 120; 100 where it says none, as a pseudo-terminal without a size)."""
    try:
        columns = os.get_terminal_size(stream.fileno()).columns
    except (OSError, ValueError, AttributeError):
        columns = 0
    return min(columns or 100, 120)
