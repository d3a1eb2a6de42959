"""Imported first by the forkserver (:data:`harness.runtime.isolation.FORKSERVER_PRELOAD`), and nowhere else: when
its command ends, the forkserver leaves at once (``os._exit`` after its exit handlers) instead of tearing down the
torch it preloaded, which takes over half a second. Until it leaves it holds the command's stdout and stderr open,
so a caller reading them to the end (a pipe, ``subprocess.run``) waits for it: every command ended that much later.
It keeps no file or buffer of its own to flush; its workers are gone before it is told to stop."""

from __future__ import annotations

import atexit
import os
import sys
import traceback

_FORKSERVER = any(frame.filename.endswith(os.path.join("multiprocessing", "forkserver.py"))
                  for frame in traceback.extract_stack())
"""Whether this module is imported by a forkserver's preload (its ``main`` is on the stack), not by a command."""


def _leave(pid: int) -> None:
    if os.getpid() == pid:  # the forkserver itself; its forked workers never run exit handlers
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


if _FORKSERVER:
    atexit.register(_leave, os.getpid())
