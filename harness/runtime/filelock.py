"""An exclusive, non-blocking lock on a result file, so two runs never write one file at once.

The lock is ``flock`` on a sidecar file (``.NAME.lock`` beside the result file): the
result file itself is replaced whole on every write, so it cannot carry a lock. The
kernel drops an ``flock`` when its holder dies, so a killed run never leaves the file
locked; the sidecar holds the holder's pid for the message another run prints. It is opened with
``O_NOFOLLOW``: a link planted at its name is refused (exit 2), never written through.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from harness.errors import UsageError


@dataclass
class RunLock:
    path: Path
    fd: int

    @classmethod
    def acquire(cls, target: Path) -> RunLock:
        """Lock ``target`` for this process, or raise a UsageError naming the run that holds it."""
        lock_path = target.parent / f".{target.name}.lock"
        for parent in (target.parent, *target.parent.parents):
            if parent.exists() and not parent.is_dir():
                raise UsageError(f"cannot write {target}: {parent} is a file, not a directory; choose another path")
        try:
            lock_path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"cannot create the directory of {target}: {exc.strerror or exc}; "
                             f"choose a writable path") from None
        while True:
            try:  # never through a link planted at the sidecar's name, never a device or a pipe
                fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
            except OSError as exc:
                if exc.errno == errno.ELOOP or lock_path.is_symlink():
                    raise UsageError(f"{lock_path} is a symbolic link; attnbench never writes through a link: "
                                     f"remove it, or give this run another output path than {target}") from None
                raise UsageError(f"cannot write beside {target} ({lock_path}: {exc.strerror or exc}); "
                                 f"choose a writable path") from None
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                os.close(fd)
                raise UsageError(f"{lock_path} is not a regular file; remove it, or give this run another output "
                                 f"path than {target}")
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.read(fd, 64).decode(errors="replace").strip() or "?"
                os.close(fd)
                raise UsageError(f"{target} is being written by another attnbench run (pid {holder}); "
                                 f"wait for it to finish, or give this run another output path") from None
            # The holder before us may have removed the sidecar between our open and our lock:
            # then we hold a lock on a file nobody else will find. Start again on the new one.
            try:
                same = os.fstat(fd).st_ino == os.stat(lock_path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                try:  # the pid only names the holder in another run's message: a full disk costs the name, not the lock
                    os.ftruncate(fd, 0)
                    os.write(fd, str(os.getpid()).encode())
                except OSError:
                    pass
                return cls(lock_path, fd)
            os.close(fd)

    def release(self) -> None:
        try:
            self.path.unlink(missing_ok=True)
        finally:
            os.close(self.fd)
