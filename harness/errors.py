"""Errors the harness raises on purpose, each with a message that names the problem and the fix."""

from __future__ import annotations

import errno

DISK_FULL_ERRNOS = frozenset(e for e in (errno.ENOSPC, getattr(errno, "EDQUOT", None), errno.EFBIG) if e is not None)
"""No space left, a quota, a file-size limit (RLIMIT_FSIZE): each a full disk to the user."""


class AttnbenchError(Exception):
    """Base class: the CLI prints these without a traceback and exits with status 2."""


class PluginError(AttnbenchError):
    """A plugin declared itself wrongly, failed to import, or clashes with another plugin."""


class UsageError(AttnbenchError):
    """Bad input from the user: a flag value, a missing file, an unknown implementation name."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C, carrying what the command leaves behind (which file, how to finish); printed once, exit 130."""


class DiskFull(AttnbenchError):
    """No space left on a device (or a file-size limit) while writing a file: exit 2, one line naming the file,
    what the command kept, and how to go on. The file itself is never left half-written."""

    def __init__(self, path: object, why: str, kept: str = "nothing was written there",
                 then: str = "free some space (or write elsewhere) and run the same command again") -> None:
        self.path, self.why, self.kept, self.then = path, why, kept, then
        super().__init__(f"{why} while writing {path}; {kept}; {then}")

    def but(self, kept: str, then: str) -> DiskFull:
        """The same failure, said by the caller that knows what was kept and how to finish."""
        return DiskFull(self.path, self.why, kept, then)


_CONTROL = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0))}
_CONTROL_BUT_NEWLINE = {c: text for c, text in _CONTROL.items() if c != 0x0A}


def printable(value: object, *, newlines: bool = False) -> str:
    """``value`` as text that cannot drive a terminal: every control character (ESC, CR, BEL, the C1 range; and
    the newline unless ``newlines``) written as its escape (``\\x1b``). The one sanitiser every line printed to a
    terminal and every Markdown cell goes through: names, reasons and exception texts come from result files
    and plugins, and a raw ESC could recolour, clear or retitle the screen, a CR overwrite a verdict."""
    return str(value).translate(_CONTROL_BUT_NEWLINE if newlines else _CONTROL)
