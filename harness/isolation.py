"""Run plugin code in worker processes, so that a crash or a hang costs one case, not the run.

A worker is a spawned process that runs tasks one after another (so an implementation's
set-up and caches are paid once). The parent waits for each answer with a timeout:

- the task raised: ``error`` with the exception type, message and traceback;
- the worker died (abort, segfault, ``os._exit``): ``crash`` with its exit code or signal;
- no answer in time: ``timeout``; the worker is killed.

After a crash or a timeout a fresh worker takes the remaining tasks. Outcomes are handed
to ``on_outcome`` as they arrive, so the caller can write them to disk at once and nothing
measured before is lost. Task functions must be importable top-level functions and their
arguments picklable (workers are spawned, not forked: forking a process with torch's
thread pools running is unsafe).
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import multiprocessing.forkserver
import multiprocessing.resource_tracker
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

_CLOCK = time.perf_counter
"""Bound when this module is imported, before any plugin is: the wall time of a task (bench holds the
worker's own account of its time against it) cannot be changed by a plugin patching ``time``."""
DEFAULT_TIMEOUT_S = 60.0
LONGEST_WAIT_S = 2_000_000.0
"""About 23 days: a wait for a worker's answer is cut to this. ``poll`` takes its timeout as a C int of
milliseconds (at most 2,147,483 s), so a longer limit (``verify --fuzz 1000000`` asks for 58 days) would
raise OverflowError; a limit of weeks is no limit in practice either way."""
OK, ERROR, CRASH, TIMEOUT = "ok", "error", "crash", "timeout"
#: The environment variables that set BLAS/OpenMP thread counts in a worker (read at its start).
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


@dataclass(frozen=True)
class Task:
    """One unit of work: ``fn(*args)`` in a worker. ``key`` identifies it to the caller."""

    key: Any
    fn: Callable[..., Any]
    args: tuple[Any, ...] = ()
    timeout: float | None = None
    """Seconds; None means the pool's default."""


@dataclass
class Outcome:
    status: str
    """ok, error, crash or timeout."""
    value: Any = None
    error: str | None = None
    """For error: "Type: message"; crash: how the worker died; timeout: the limit."""
    traceback: str | None = None
    seconds: float = 0.0


def _die_with_parent() -> None:
    """Linux: the kernel kills this worker when its parent dies (even by SIGKILL), so no orphan runs on."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the broken pipe below ends the worker instead
        return
    if os.getppid() == 1:  # the parent died before the request took effect
        os._exit(0)


def _stdout_to_stderr() -> None:
    """Plugin output goes to stderr: the parent's stdout is the command's answer (a table, JSON)."""
    sys.stdout.flush()
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # C and subprocess output too, not only print()
    sys.stdout = sys.stderr


def _worker_main(conn: Connection) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    _die_with_parent()
    _stdout_to_stderr()
    try:
        _serve(conn)
    except (BrokenPipeError, EOFError, ConnectionResetError):
        pass  # the parent is gone: nobody is waiting for an answer; exit quietly


def _serve(conn: Connection) -> None:
    while True:
        try:
            message = conn.recv()
        except EOFError:
            return
        if message is None:
            return
        fn, args = message
        try:
            reply: tuple[Any, ...] = (OK, fn(*args), None, None)
        except BaseException as exc:  # noqa: BLE001 - every failure of plugin code is an outcome
            reply = (ERROR, None, f"{type(exc).__name__}: {exc}", traceback.format_exc())
        try:
            conn.send(reply)
        except Exception as exc:  # noqa: BLE001 - an unpicklable result is the task's error, not the worker's death
            conn.send((ERROR, None, f"result could not be sent back: {type(exc).__name__}: {exc}", None))


def _describe_death(exitcode: int | None) -> str:
    if exitcode is None:
        return "worker stopped answering"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        return f"worker killed by {name} (exit code {exitcode})"
    return f"worker exited with code {exitcode}"


@contextlib.contextmanager
def _sigint_blocked() -> Iterator[None]:
    """Processes started inside the block begin life with SIGINT blocked: a thread's signal mask
    survives fork and exec, and Python keeps it. A terminal sends Ctrl-C to the whole process group,
    and a helper caught starting up (the forkserver imports torch for seconds, before it can ignore
    SIGINT) would print a KeyboardInterrupt traceback of its own; only the command answers Ctrl-C.
    CPython starts its resource tracker the same way. A SIGINT meant for this process while the block
    runs stays pending and is delivered when it ends, so none is lost."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


@dataclass
class _Worker:
    process: mp.process.BaseProcess
    conn: Connection

    @classmethod
    def start(cls, method: str = "spawn") -> _Worker:
        context = _context(method)
        parent, child = context.Pipe()
        process = context.Process(target=_worker_main, args=(child,), daemon=True)
        # The resource tracker first: starting it unblocks SIGINT in this thread whatever the mask was.
        multiprocessing.resource_tracker.ensure_running()
        if context.get_start_method() == "forkserver":
            with _sigint_blocked():  # the server (and so every worker it forks) starts with SIGINT blocked
                multiprocessing.forkserver.ensure_running()
            process.start()  # waits for the server's preload: not in the block, so Ctrl-C stops it at once
        else:
            with _sigint_blocked():
                process.start()
        child.close()
        worker = cls(process, parent)
        _LIVE.add(worker)
        return worker

    def __hash__(self) -> int:
        return id(self)

    def stop(self, kill: bool = False) -> None:
        if not kill:
            try:
                self.conn.send(None)
            except (OSError, EOFError):
                pass
            self.process.join(timeout=5)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(timeout=5)
        self.conn.close()
        _LIVE.discard(self)


_LIVE: set[_Worker] = set()

FORKSERVER_PRELOAD = ["torch", "numpy", "harness.verify.checks"]
"""What a forkserver imports once, so each verify worker starts in milliseconds instead of seconds."""


def _context(method: str) -> Any:
    """``spawn`` (a clean interpreter: bench's timing workers) or ``forkserver`` (verify's many workers).

    A forkserver is a single-threaded process that imported torch once and forks a worker per
    request: as clean as spawn for our purposes (no thread pool is running when it forks), without
    paying torch's import for every implementation. Where there is no forkserver, spawn.
    """
    if method == "forkserver" and "forkserver" in mp.get_all_start_methods():
        context = mp.get_context("forkserver")
        context.set_forkserver_preload(FORKSERVER_PRELOAD)
        return context
    return mp.get_context("spawn")


def kill_all_workers() -> None:
    """Kill every worker of this process at once (Ctrl-C): a task still running in one is abandoned.

    Threads waiting on those workers get an end-of-file and return; their callers must check
    whether the run was stopped before they record the outcome as a crash.
    """
    for worker in list(_LIVE):
        if worker.process.is_alive():
            worker.process.kill()


@dataclass
class WorkerPool:
    """Runs tasks in one worker at a time (timing on two cores must not compete with itself)."""

    timeout: float = DEFAULT_TIMEOUT_S
    start_method: str = "spawn"
    """"spawn" or "forkserver" (see :func:`_context`)."""
    _worker: _Worker | None = field(default=None, repr=False)

    def run(self, task: Task) -> Outcome:
        if self._worker is None or not self._worker.process.is_alive():
            self._worker = _Worker.start(self.start_method)
        worker = self._worker
        limit = min(self.timeout if task.timeout is None else task.timeout, LONGEST_WAIT_S)
        started = _CLOCK()
        try:
            worker.conn.send((task.fn, task.args))
            answered = worker.conn.poll(limit)
            if answered:
                status, value, error, trace = worker.conn.recv()
                return Outcome(status, value, error, trace, _CLOCK() - started)
        except (EOFError, OSError, BrokenPipeError):
            worker.process.join(timeout=5)
            self._discard(kill=True)
            return Outcome(CRASH, error=_describe_death(worker.process.exitcode),
                           seconds=_CLOCK() - started)
        self._discard(kill=True)
        return Outcome(TIMEOUT, error=f"no answer within {limit:g} s; worker killed",
                       seconds=_CLOCK() - started)

    @property
    def running(self) -> bool:
        """A worker is up (the next task does not pay for starting one)."""
        return self._worker is not None and self._worker.process.is_alive()

    def _discard(self, kill: bool) -> None:
        if self._worker is not None:
            self._worker.stop(kill=kill)
            self._worker = None

    def close(self) -> None:
        self._discard(kill=False)

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self._discard(kill=exc[0] is not None)


def run_isolated(
    tasks: Iterable[Task], on_outcome: Callable[[Task, Outcome], None], *, timeout: float = DEFAULT_TIMEOUT_S,
) -> None:
    """Run every task in a worker (restarted after a crash or timeout); report each outcome as it comes."""
    with WorkerPool(timeout=timeout) as pool:
        for task in tasks:
            on_outcome(task, pool.run(task))
