"""What a plugin's worker may not do to the command that started it: signal it, trace it, or write its memory.

A plugin runs as the same user as the command, so the kernel would let it ``kill`` the command (by pid, by the
command's process group, or by ``kill(-1)``), attach to it with ``ptrace`` or write ``/proc/PID/mem``. Each of
those ends a run with nothing said: exit 137 or 143, no cells, a lock left. Two kernel features close them:

- the command and its forkserver are *not dumpable* (``PR_SET_DUMPABLE`` 0, what ssh-agent does): another process
  of the same user may no longer ptrace them or open their memory (root, holding ``CAP_SYS_PTRACE``, still may);
- each worker loads a seccomp filter before any plugin code runs (``pyseccomp``, over the system's libseccomp),
  which makes every call that would signal the command, its forkserver or their process group fail with EPERM:
  ``kill``, ``tgkill``, ``rt_sigqueueinfo`` and ``rt_tgsigqueueinfo`` naming them, ``kill(-1)``, ``fcntl(F_SETOWN)``
  naming them (a SIGIO sent later), and the calls whose target cannot be read from their arguments (``tkill``,
  ``pidfd_send_signal``, ``pidfd_getfd``, ``F_SETOWN_EX``, ``FIOSETOWN``/``SIOCSPGRP``, ``ptrace``,
  ``process_vm_writev``, ``clone(CLONE_PARENT)``, which would also leave the worker's tree; ``clone3`` answers
  ENOSYS, so the C library falls back to ``clone``, as it does under Docker's default profile).

The plugin sees ``PermissionError``: its case is an ``error`` that says what it tried, and the command goes on.
A filter is inherited by every process the worker starts, across ``exec`` too. Where it cannot load (not Linux,
no libseccomp, a kernel without seccomp), the worker runs unconfined and :func:`confine_worker` says why.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterable

_PR_SET_DUMPABLE = 4
_F_SETOWN, _F_SETOWN_EX = 8, 15
_FIOSETOWN, _SIOCSPGRP = 0x8901, 0x8902
_CLONE_PARENT = 0x00008000
_LOW_32 = 0xFFFFFFFF

_BY_TARGET = ("kill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo")
"""Calls whose first argument is the process (or, negative for ``kill``, the group) they signal."""

_REFUSED = ("tkill", "pidfd_send_signal", "pidfd_getfd", "ptrace", "process_vm_writev")
"""Calls whose target the filter cannot tell from their arguments (a thread id, a descriptor): refused whole. A C
library signals its own threads with ``tgkill``, never ``tkill``."""


def protect_command() -> None:
    """Make this process (the command) undumpable: a same-user plugin can no longer ptrace it or write its memory.
    A fork (the forkserver) keeps that; a new interpreter does not, so workers started by ``exec`` stay debuggable."""
    from harness.runtime.process_tree import prctl

    prctl(_PR_SET_DUMPABLE, 0)


def worker_dumpable() -> None:
    """A worker forked from the command's forkserver inherited "not dumpable": put it back, so the command (and a
    debugger) can read the worker's ``/proc`` entries as those of any other child."""
    from harness.runtime.process_tree import prctl

    prctl(_PR_SET_DUMPABLE, 1)


def unavailable() -> str | None:
    """Why no worker here can load the filter (no pyseccomp, no libseccomp, an architecture it does not know), or
    None when they can. Builds a filter without loading it."""
    try:
        import pyseccomp as seccomp

        seccomp.SyscallFilter(defaction=seccomp.ALLOW).add_rule(seccomp.ERRNO(errno.EPERM), "kill")
    except Exception as exc:  # noqa: BLE001 - whatever stops it is the reason
        return f"no seccomp filter: {type(exc).__name__}: {exc}"
    return None


def confine_worker(pids: Iterable[int], groups: Iterable[int]) -> str | None:
    """Load the filter that stops this process and its descendants from signalling ``pids`` or ``groups``
    (process group ids) or tracing anything. Returns None when it is loaded, else why it is not."""
    pids = sorted({p for p in pids if p > 1})
    groups = sorted({g for g in groups if g > 1})
    try:
        import pyseccomp as seccomp
    except (ImportError, OSError) as exc:  # the package, or the system's libseccomp.so.2, is missing
        return f"no seccomp filter: {type(exc).__name__}: {exc}"
    try:
        refuse = seccomp.ERRNO(errno.EPERM)
        rules = seccomp.SyscallFilter(defaction=seccomp.ALLOW)

        def masked(arg: int, value: int) -> object:  # an int argument, however its register's top half was filled
            return seccomp.Arg(arg, seccomp.MASKED_EQ, _LOW_32, value & _LOW_32)

        for call in _BY_TARGET:
            for pid in pids:
                rules.add_rule(refuse, call, masked(0, pid))
        for target in (-1, *(-g for g in groups)):  # everyone, or a whole group
            rules.add_rule(refuse, "kill", masked(0, target))
        for owner in (*pids, *(-g for g in groups)):
            rules.add_rule(refuse, "fcntl", masked(1, _F_SETOWN), masked(2, owner))
        rules.add_rule(refuse, "fcntl", masked(1, _F_SETOWN_EX))
        for request in (_FIOSETOWN, _SIOCSPGRP):
            rules.add_rule(refuse, "ioctl", masked(1, request))
        for call in _REFUSED:
            rules.add_rule(refuse, call)
        rules.add_rule(refuse, "clone", seccomp.Arg(0, seccomp.MASKED_EQ, _CLONE_PARENT, _CLONE_PARENT))
        with contextlib.suppress(Exception):  # a libseccomp too old to know clone3: then nothing calls it either
            rules.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
        rules.load()
    except Exception as exc:  # noqa: BLE001 - any failure leaves the worker as it was: unconfined, and said so
        return f"no seccomp filter: {type(exc).__name__}: {exc}"
    return None


def command_ids() -> tuple[int, int]:
    """This process's pid and process group: what the workers it starts must not signal."""
    return os.getpid(), os.getpgrp()
