"""A worker's process tree (Linux, through ``prctl`` and ``/proc``): the worker dies with its parent, leads a
process group of its own and adopts every orphan of the plugin's, so whatever a plugin starts can be found
(:func:`descendants`) and ended (:func:`kill_tree`) with the worker. Elsewhere each call is a no-op or finds
nothing, and :mod:`harness.runtime.isolation`'s broken pipe ends a worker instead.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time

_PR_SET_PDEATHSIG, _PR_SET_CHILD_SUBREAPER = 1, 36


def prctl(option: int, value: int) -> bool:
    """``prctl(option, value)`` on Linux; False where it failed or there is none."""
    try:
        import ctypes

        return int(ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)) == 0
    except (OSError, AttributeError):  # not Linux
        return False


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask, which a container or `taskset` narrows)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def die_with_parent() -> None:
    """Linux: the kernel kills this worker when its parent dies (even by SIGKILL), so no orphan runs on."""
    if not prctl(_PR_SET_PDEATHSIG, signal.SIGKILL):
        return  # not Linux: the worker's pipe to its parent breaks and ends it instead
    if os.getppid() == 1:  # the parent died before the request took effect
        os._exit(0)


def lead_own_session() -> None:
    """Lead a session and a process group of its own (killed whole when the worker stops; no terminal, and out
    of the command's group, so a plugin's ``killpg`` of its own group never reaches the command) and adopt every
    orphan of the plugin's (Linux: a child subreaper), so nothing the plugin starts leaves the worker's tree."""
    try:
        os.setsid()
    except OSError:  # already a group leader (never, for a fresh worker): a group of its own at least
        with contextlib.suppress(OSError):
            os.setpgid(0, 0)
    prctl(_PR_SET_CHILD_SUBREAPER, 1)


def _stat(pid: int) -> tuple[int, str, str] | None:
    """(parent pid, state, command name) of process ``pid`` from /proc, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read().decode(errors="replace")
    except OSError:
        return None
    name, _, rest = text.partition(" (")[2].rpartition(") ")
    fields = rest.split()
    return (int(fields[1]), fields[0], name) if len(fields) > 1 else None


def descendants(root: int) -> dict[int, str]:
    """Every live process below ``root`` (zombies excepted), pid -> command name; empty where /proc is missing."""
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return {}
    children: dict[int, list[tuple[int, str]]] = {}
    for pid in pids:
        info = _stat(pid)
        if info is not None and info[1] != "Z":
            children.setdefault(info[0], []).append((pid, info[2]))
    found: dict[int, str] = {}
    todo = [root]
    while todo:
        for pid, name in children.get(todo.pop(), []):
            if pid not in found:
                found[pid] = name
                todo.append(pid)
    return found


def kill_tree(root: int, *, include_root: bool, group: bool = False) -> dict[int, str]:
    """Stop, then kill, every process below ``root`` (and ``root`` itself, and the process group it leads, if
    asked); return what was found below it. Stopped first, so none forks a new child while the others die.
    Ask for ``root`` only while it is alive or unreaped: a reaped pid may be someone else's by now."""
    found: dict[int, str] = {}
    for _ in range(10):  # each round stops what the round before missed (a child forked meanwhile)
        new = {pid: name for pid, name in descendants(root).items() if pid not in found}
        if not new:
            break
        for pid in new:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGSTOP)
        found.update(new)
    for pid in found:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    if group:
        with contextlib.suppress(OSError):
            os.killpg(root, signal.SIGKILL)  # the group outlives its leader: members a crash left behind
    if include_root:
        with contextlib.suppress(OSError):
            os.kill(root, signal.SIGKILL)
    return found


def _task_states(pid: int) -> list[str] | None:
    """The state letter of every thread of process ``pid`` (None when it is gone)."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    states = []
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat", "rb") as f:
                states.append(f.read().rpartition(b") ")[2][:1].decode())
        except OSError:
            continue
    return states


def tree(pid: int) -> list[int]:
    """``pid`` and every live process below it, read from each thread's ``children`` list."""
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        if p in found:
            continue
        found.append(p)
        try:
            tids = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{p}/task/{tid}/children", "rb") as f:
                    todo.extend(int(c) for c in f.read().split())
            except OSError:
                continue
    return found


def _signal_tree(pids: list[int], group: int, sig: int) -> None:
    with contextlib.suppress(OSError):
        os.killpg(group, sig)
    for p in pids:
        with contextlib.suppress(OSError):
            os.kill(p, sig)


def process_cpu_s(pid: int) -> float:
    """The kernel's CPU clock of process ``pid`` (every thread, the exited ones too); 0 where it is gone."""
    try:
        return time.clock_gettime((~pid << 3) | 2)
    except OSError:
        return 0.0


STOP_WAIT_S = 10.0
"""The longest a stop waits for every thread to take it."""


class Tree:
    """The worker's process tree as the parent stops, continues and clocks it."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        try:
            self.group = os.getpgid(pid)
        except OSError:
            self.group = pid
        self.pids = [pid]

    def stop(self) -> None:
        """Stop every process of the tree and wait until every thread reads stopped; a process forked during the
        call is found after (each thread's ``children``) and stopped too, before anything is read."""
        _signal_tree(self.pids, self.group, signal.SIGSTOP)
        for _ in range(100):
            for p in self.pids:
                if not self._stopped(p):
                    raise RuntimeError(f"process {p} of the worker's tree did not stop")
            found = tree(self.pid)
            if found == self.pids:
                return
            self.pids = found
            _signal_tree(self.pids, self.group, signal.SIGSTOP)
        raise RuntimeError("the worker's process tree kept growing while it was being stopped")

    def _stopped(self, pid: int) -> bool:
        """Wait (at most :data:`STOP_WAIT_S`) until every thread of ``pid`` reads stopped; a thread must run once to
        take its stop, so on a busy machine this waits for a core."""
        deadline = time.monotonic() + STOP_WAIT_S
        while time.monotonic() < deadline:
            states = _task_states(pid)
            if states is None or all(s in "tTZX" for s in states):
                return True
            time.sleep(0)
        return False

    def resume(self) -> None:
        _signal_tree(self.pids, self.group, signal.SIGCONT)

    def signal(self, sig: int) -> None:
        """``sig`` to every process of the tree as it is now, without waiting for it to land."""
        self.pids = tree(self.pid)
        _signal_tree(self.pids, self.group, sig)

    def cpu_s(self) -> float:
        """The CPU seconds of the tree's live processes (every thread of each, the exited threads too): a child that
        ended and was reaped between two readings is not counted (docs/integrity.md)."""
        return sum(process_cpu_s(p) for p in self.pids)
