"""A worker's CPU account as the kernel keeps it: a cgroup of the worker's own, where the machine lets us make one.

A CPU-clock sample must hold every CPU second the call's work took, in whatever process it ran. The sum of the
tree's live processes' clocks (:meth:`harness.runtime.process_tree.Tree.cpu_s`) misses a child forked during a
call that exits and is reaped before the parent reads: its CPU time is gone with it. A cgroup counts every
process it ever held, exited ones included, to the microsecond (``cpu.stat``'s ``usage_usec``), and a child
forked inside it is born inside it.

:func:`cpu_group` makes one below this process's own cgroup v2 and moves the worker into it. It needs write access
to that part of ``/sys/fs/cgroup`` (root in a container, or a delegated systemd scope); where it has none, it
returns None and the tree's sum stands, the weaker guarantee docs/integrity.md states. Groups are named
``attnbench-<parent pid>-<worker pid>`` and removed once empty: when their worker has ended, and at exit.
"""

from __future__ import annotations

import atexit
import contextlib
import os
from pathlib import Path

PREFIX = "attnbench-"


def _mounts() -> list[tuple[str, str, str]]:
    """(mount point, type, options) of every cgroup mount."""
    try:
        lines = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        parts = line.split()
        if len(parts) >= 4 and parts[2] in ("cgroup", "cgroup2"):
            out.append((parts[1], parts[2], parts[3]))
    return out


def _own_paths() -> dict[str, str]:
    """This process's cgroup path per hierarchy: "" for v2 (v1's by each controller's name)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return {}
    paths = {}
    for line in lines:
        _, controllers, path = line.split(":", 2)
        for name in controllers.split(",") if controllers else [""]:
            paths[name] = path
    return paths


def _places() -> list[tuple[Path, str]]:
    """Where a group can go, with the file its CPU time is read from: cgroup v2 only. (v1's cpuacct was tried: on a
    2-core Zen 5 VM, a worker moved into a cpuacct group of its own read twice the CPU time per call for whole
    runs, where the same worker outside it, or in a v2 group, read its own.)"""
    own = _own_paths()
    return [(Path(point + own[""]), "cpu.stat") for point, kind, _ in _mounts() if kind == "cgroup2" and "" in own]


class CpuGroup:
    """One worker's cgroup: the CPU seconds of every process it ever held."""

    def __init__(self, path: Path, counter: str) -> None:
        self.path, self.counter = path, counter

    def cpu_s(self) -> float:
        for line in (self.path / self.counter).read_text().splitlines():
            if line.startswith("usage_usec "):
                return int(line.split()[1]) / 1e6
        raise OSError(f"{self.path / self.counter} has no usage_usec")


_GROUPS: dict[int, CpuGroup | None] = {}
_MADE: list[Path] = []


def cpu_group(pid: int, members: list[int] | None = None) -> CpuGroup | None:
    """Worker ``pid``'s group, made on first asking and joined by ``pid`` and ``members`` (its tree as it is then);
    None where no group can be made here (and kept so)."""
    if pid in _GROUPS:
        return _GROUPS[pid]
    _sweep()
    group = None
    for place, counter in _places():
        path = place / f"{PREFIX}{os.getpid()}-{pid}"
        try:
            path.mkdir()
        except OSError:
            continue
        _MADE.append(path)
        try:
            (path / "cgroup.procs").write_text(str(pid))
            for member in members or []:
                if member != pid:
                    with contextlib.suppress(OSError):  # one that ended meanwhile
                        (path / "cgroup.procs").write_text(str(member))
            candidate = CpuGroup(path, counter)
            candidate.cpu_s()
        except OSError:
            _remove(path)
            continue
        group = candidate
        break
    _GROUPS[pid] = group
    return group


def _remove(path: Path) -> bool:
    try:
        path.rmdir()
    except OSError:
        return False
    with contextlib.suppress(ValueError):
        _MADE.remove(path)
    return True


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def _sweep() -> None:
    """Remove the empty groups of workers that ended: this run's, and those a run that died left behind."""
    for pid, group in list(_GROUPS.items()):
        if group is not None and not _alive(pid) and _remove(group.path):
            del _GROUPS[pid]
    for place, _ in _places():
        with contextlib.suppress(OSError):
            for path in place.glob(f"{PREFIX}*-*"):
                owner = path.name[len(PREFIX):].partition("-")[0]
                if owner.isdigit() and int(owner) != os.getpid() and not _alive(int(owner)):
                    _remove(path)


@atexit.register
def _remove_all() -> None:
    for path in list(_MADE):
        _remove(path)
