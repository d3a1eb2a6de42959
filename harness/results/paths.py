"""How every command touches a file: one reader and one writer, each refusing what could hurt.

- :func:`read_text` reads a result file (or any JSON a command takes as input): the path is opened without
  blocking and must be a regular file (a device, a FIFO, a socket or a link to one is refused before a byte
  is read) no larger than :data:`MAX_RESULT_BYTES`; :func:`parse_json` parses it, refusing an object that
  holds a key twice;
- :func:`write_atomic` writes an output: a temporary file beside the final name, fsync, ``os.replace``, so a
  reader (or a crash, or a full disk) never sees half a file; never through a symbolic link at the final
  name; a failure is a one-line error naming the file (exit 2);
- :func:`check_output` and :func:`check_directory` are called before any work: an output flag never names
  an input of the same command, a link, or an existing file that is not that command's own kind of output.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from harness.errors import DISK_FULL_ERRNOS, DiskFull, UsageError

MAX_RESULT_BYTES = 2**30
"""The largest result file (or pytest-benchmark JSON) a command reads: 1 GiB, about 50 times the largest
result file a full sweep writes. A larger file is refused unread (exit 2)."""


def _named(path: Path, flag: str | None) -> str:
    return f"{flag} {path}" if flag else str(path)


def read_text(path: Path, limit: int = MAX_RESULT_BYTES) -> str:
    """A file's text; a UsageError naming the path when it is a directory, not a regular file, larger than
    ``limit``, or cannot be read (FileNotFoundError is left to the caller, whose message says what it wanted)."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise
    except IsADirectoryError:
        raise UsageError(f"{path} is a directory; give the path of a result file (e.g. results/<run-id>.json)") from None
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}; give a result file written by attnbench") from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise UsageError(f"{path} is a directory; give the path of a result file (e.g. results/<run-id>.json)")
        if not stat.S_ISREG(info.st_mode):
            raise UsageError(f"{path} is not a regular file (a device, a pipe or a socket); give a result file "
                             "written by attnbench")
        if info.st_size > limit:
            raise UsageError(f"{path} is larger than {limit // 2**20} MiB, the largest result file attnbench reads "
                             f"({info.st_size} bytes); give a result file written by attnbench")
        chunks, size = [], 0
        while size <= limit:  # a file that grows while it is read still stops at the cap
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            raise UsageError(f"{path} is larger than {limit // 2**20} MiB, the largest result file attnbench reads; "
                             "give a result file written by attnbench")
        return b"".join(chunks).decode("utf-8")
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}; give a result file written by attnbench") from None
    except UnicodeDecodeError as exc:
        raise UsageError(f"cannot read {path}: {exc}; give a result file written by attnbench") from None
    finally:
        os.close(fd)


class DuplicateKey(ValueError):
    """One JSON object that holds a key twice (JSON parsers disagree on which value wins)."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise DuplicateKey(key)
        out[key] = value
    return out


def parse_json(text: str, path: Path) -> Any:
    """A file's JSON document; a UsageError naming the file for anything that is not one (bad syntax, an
    integer past Python's digit limit, nesting past the parser's recursion limit)."""
    try:
        return json.loads(text, object_pairs_hook=_unique_keys)
    except DuplicateKey as exc:
        raise UsageError(f"{path}: a damaged result file: the key {exc.key!r} appears twice in one object; "
                         "a file attnbench wrote has each key once") from None
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path}: not valid JSON ({exc})") from None
    except RecursionError:
        raise UsageError(f"{path}: a damaged result file: nested too deeply to be a result file") from None
    except ValueError as exc:  # e.g. "Exceeds the limit (4300 digits) for integer string conversion"
        raise UsageError(f"{path}: a damaged result file: {exc}") from None


def refuse_link(path: Path, flag: str | None = None) -> None:
    """A UsageError when ``path`` is a symbolic link: attnbench never writes through one."""
    if Path(path).is_symlink():
        raise UsageError(f"{_named(path, flag)} is a symbolic link; attnbench never writes through a link: "
                         "remove it or give another path")


def check_directory(out: Path, flag: str | None = None) -> None:
    """Before any work: ``out`` can be an output directory (not a link, not a file; created if missing and
    writable), or a UsageError naming it."""
    out = Path(out)
    refuse_link(out, flag)
    if out.exists() and not out.is_dir():
        raise UsageError(f"{_named(out, flag)} is a file, not a directory; give a directory path (it is created if missing)")
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as exc:
        raise UsageError(f"cannot write to {_named(out, flag)} ({exc.strerror or exc}); give a writable directory") from None


def same_file(a: Path, b: Path) -> bool:
    """Whether two paths name one file (the same inode, or the same path once resolved)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return Path(a).resolve() == Path(b).resolve()


def check_output(path: Path, *, flag: str | None, inputs: Iterable[Path] = (), kind: str = "",
                 ours: Callable[[Path], bool] | None = None) -> None:
    """Before any work: ``path`` may receive an output. Refused (a UsageError naming it): an input of the same
    command, a link, a directory or another non-regular file, and an existing non-empty file that ``ours``
    does not recognise as this command's own ``kind`` of output. Its directory must be writable."""
    path = Path(path)
    for given in inputs:
        if same_file(path, given):
            raise UsageError(f"{_named(path, flag)} is an input of this command; refusing to overwrite it: "
                             "give another path for the output")
    refuse_link(path, flag)
    if path.exists():
        if path.is_dir():
            raise UsageError(f"{_named(path, flag)} is a directory; give a file path")
        if not stat.S_ISREG(path.stat().st_mode):
            raise UsageError(f"{_named(path, flag)} is not a regular file; give a file path")
        if ours is not None and path.stat().st_size and not ours(path):
            raise UsageError(f"{_named(path, flag)} exists and is not {kind or 'a file this command wrote'}; "
                             "refusing to overwrite it: give another path, or remove it")
    parent = path.parent
    for folder in (parent, *parent.parents):
        if folder.exists():
            if not folder.is_dir():
                raise UsageError(f"cannot write {_named(path, flag)}: {folder} is a file, not a directory; "
                                 "give a writable path")
            if not os.access(folder, os.W_OK | os.X_OK):
                raise UsageError(f"cannot write {_named(path, flag)}: {folder} is not writable; give a writable path")
            break


def starts_with(prefix: bytes) -> Callable[[Path], bool]:
    """An ``ours`` test for :func:`check_output`: the file begins with ``prefix`` (a page's fixed first line)."""
    def test(path: Path) -> bool:
        try:
            with open(path, "rb") as f:
                return f.read(len(prefix)) == prefix
        except OSError:
            return False
    return test


def is_disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` says the device (or a limit) has no room for what was being written."""
    return isinstance(exc, OSError) and exc.errno in DISK_FULL_ERRNOS


def disk_full(exc: OSError, path: Path, kept: str = "nothing was written there") -> DiskFull:
    """The user's error for ``exc`` (:func:`is_disk_full`) while writing ``path``."""
    return DiskFull(path, exc.strerror or os.strerror(exc.errno or 0), kept)


def umask() -> int:
    """This process's umask, read without changing it (Linux lists it in /proc; elsewhere set and restored)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    current = os.umask(0o022)
    os.umask(current)
    return current


def file_mode(path: Path) -> int:
    """The permission bits a rewrite of ``path`` keeps: the existing file's, or what ``open`` would give a
    new file under the umask (0666 less the umask), as for any file a command creates."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        return 0o666 & ~umask()


def write_atomic(path: Path, data: str | bytes, *, flag: str | None = None,
                 kept: str = "the file is as last written (never half-written)") -> None:
    """Write ``data`` to ``path`` whole or not at all: a temporary file beside it, fsync, ``os.replace``.

    Never through a link at ``path`` (a UsageError); a full disk is a :class:`DiskFull` naming the file and
    ``kept``; any other failure a UsageError naming it. The directory is created if missing."""
    path = Path(path)
    refuse_link(path, flag)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    tmp: str | None = None
    try:
        if path.is_dir():
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        path.parent.mkdir(parents=True, exist_ok=True)
        mode = file_mode(path)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            os.fchmod(fd, mode)  # mkstemp's 0600 would narrow the file: keep its mode, or the umask's for a new one
            view = memoryview(payload)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        tmp = None
    except OSError as exc:
        if is_disk_full(exc):
            raise disk_full(exc, path, kept) from None
        raise UsageError(f"cannot write {_named(path, flag)}: {exc.strerror or exc}; give a writable path") from None
    finally:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
