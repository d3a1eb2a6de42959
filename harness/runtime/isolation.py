"""Run plugin code in worker processes, so that a crash or a hang costs one case, not the run.

A worker is a spawned process that runs tasks one after another (so an implementation's
set-up and caches are paid once). The parent waits for each answer with a timeout:

- the task raised: ``error`` with the exception type, message and traceback;
- the worker died (abort, segfault, ``os._exit``): ``crash`` with its exit code or signal;
- no answer in time: ``timeout``; the worker is killed.

Each worker leads a process group of its own and is a *child subreaper*: whatever a plugin starts
(a child, a double-forked daemon, one that calls ``setsid``) stays in the worker's tree, is counted
after every task (:attr:`Outcome.leftovers`) and is killed with the worker, so no orphan outlives
a run or holds its output pipe open. A worker may be given a memory cap (``RLIMIT_DATA``, which
counts what is allocated, not the virtual address space torch reserves): an allocation past it
fails in the worker and the outcome says so (:data:`OUT_OF_MEMORY`) instead of the machine's
out-of-memory killer choosing a victim.

After a crash or a timeout a fresh worker takes the remaining tasks. Outcomes are handed
to ``on_outcome`` as they arrive, so the caller can write them to disk at once and nothing
measured before is lost. Task functions must be importable top-level functions and their
arguments picklable (workers are spawned, not forked: forking a process with torch's
thread pools running is unsafe).

The worker's process tree is :mod:`harness.runtime.process_tree`. The rest is one module:
the worker's side (its start, memory cap, task loop and out-of-memory note) and the parent's (the pool, the
waits, how a death is described) are the two ends of one pipe protocol, read together.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import multiprocessing.forkserver
import multiprocessing.reduction
import multiprocessing.resource_tracker
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from harness.runtime import confinement, streams
from harness.runtime.process_tree import Tree, die_with_parent, kill_tree, lead_own_session

_CLOCK = time.perf_counter
"""Bound when this module is imported, before any plugin is: the wall time of a task (bench holds the
worker's own account of its time against it) cannot be changed by a plugin patching ``time``."""
DEFAULT_TIMEOUT_S = 60.0
LONGEST_WAIT_S = 2_000_000.0
"""About 23 days: a wait for a worker's answer is cut to this. ``poll`` takes its timeout as a C int of
milliseconds (at most 2,147,483 s), so a longer limit (``verify --fuzz 1000000`` asks for 58 days) would
raise OverflowError; a limit of weeks is no limit in practice either way."""
OK, ERROR, CRASH, TIMEOUT = "ok", "error", "crash", "timeout"
LONGEST_SCAN_S = 0.05
"""The most a worker's scan for leftover processes is taken off a task's time (it takes ~10 ms on a busy machine)."""
OUT_OF_MEMORY = "out of memory"
"""How an outcome's error begins when the task failed to allocate past the worker's memory cap."""
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
    end_leftovers: bool = False
    """Kill what the task left running as soon as it returns (bench: nothing may run beside the next timing);
    otherwise the worker's processes live as long as it does (a plugin's helper pool, say)."""


@dataclass
class Outcome:
    status: str
    """ok, error, crash or timeout."""
    value: Any = None
    error: str | None = None
    """For error: "Type: message"; crash: how the worker died; timeout: the limit."""
    traceback: str | None = None
    seconds: float = 0.0
    leftovers: tuple[str, ...] = ()
    """Processes the task started that were still running when it returned ("pid 123 (sleep)"), killed then:
    found for a task that asks for it (:attr:`Task.end_leftovers`); any other task's die with its worker."""


SOCKET_PATH_MAX = 107
"""The longest path a Unix socket binds to on Linux (``sun_path`` holds 108 bytes with its terminator)."""


def _short_socket_dir() -> None:
    """The forkserver listens on a Unix socket in multiprocessing's temporary directory, under ``TMPDIR``; a long
    ``TMPDIR`` (CI runners', pytest's) makes that path too long to bind ("AF_UNIX path too long"). Such a
    directory is replaced, for this process, by one under /tmp, removed at exit as multiprocessing's own is."""
    import shutil
    import tempfile
    from multiprocessing import process, util

    if len(util.get_temp_dir()) + len("/listener-12345678") <= SOCKET_PATH_MAX or not os.path.isdir("/tmp"):
        return
    short = tempfile.mkdtemp(prefix="pymp-", dir="/tmp")
    util.Finalize(None, shutil.rmtree, args=[short], kwargs={"ignore_errors": True}, exitpriority=-100)
    process.current_process()._config["tempdir"] = short  # type: ignore[attr-defined]  # util.get_temp_dir()'s cache


def _cap_memory(limit_bytes: int | None) -> None:
    """At most ``limit_bytes`` of data (heap and anonymous mappings; not the address space torch reserves)."""
    if not limit_bytes:
        return
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
        cap = limit_bytes if hard == resource.RLIM_INFINITY else min(limit_bytes, hard)
        resource.setrlimit(resource.RLIMIT_DATA, (cap, hard))
    except (ImportError, ValueError, OSError):
        pass  # no such limit here: the budget's prediction alone guards the machine


WORKER_BASE_BYTES = 2 << 30
"""What a worker holds before its first case (an interpreter, torch, NumPy, thread stacks: 0.2-1 GiB measured),
with room to spare: added to a run's memory budget to make a worker's cap."""


def memory_cap(budget_bytes: float | None) -> int | None:
    """A worker's data cap for a run whose cases may each need ``budget_bytes`` (None: no cap)."""
    return None if not budget_bytes else int(budget_bytes) + WORKER_BASE_BYTES


def available_ram_bytes() -> int | None:
    """MemAvailable (Linux), or None where it cannot be read."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _end_leftovers() -> tuple[str, ...]:
    """In a worker: kill what the last task left running below it and reap it (it is this subreaper's now)."""
    found = kill_tree(os.getpid(), include_root=False)
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass
    return tuple(f"pid {pid} ({name})" for pid, name in sorted(found.items()))


def _is_out_of_memory(exc: BaseException) -> bool:
    """An allocation refused: Python's and NumPy's MemoryError, or torch's CPU allocator (a RuntimeError)."""
    if isinstance(exc, MemoryError):
        return True
    text = str(exc)
    return isinstance(exc, RuntimeError) and ("can't allocate memory" in text or "not enough memory" in text)


def _memory_note() -> str:
    """The worker's data size and cap, for an out-of-memory outcome."""
    try:
        import resource

        cap = resource.getrlimit(resource.RLIMIT_DATA)[0]
        with open("/proc/self/status") as f:
            data = next((line.split()[1] for line in f if line.startswith("VmData:")), None)
    except (ImportError, OSError, ValueError):
        return ""
    used = f"{int(data) / 2**20:.2f} GiB in use" if data else "usage unknown"
    limit = "no cap" if cap == resource.RLIM_INFINITY else f"the worker's cap is {cap / 2**30:.2f} GiB"
    return f" ({used}; {limit}, from the memory budget)"


def _own_streams() -> None:
    """stdin reads /dev/null (a plugin never reads the command's input); plugin output goes to stderr (the
    parent's stdout is the command's answer: a table, JSON), or to /dev/null where the command has no stderr."""
    streams.stdin_from_devnull()
    streams.fill_standard_fds()
    with contextlib.suppress(OSError, ValueError, AttributeError):
        sys.stdout.flush()
    with contextlib.suppress(OSError):
        os.dup2(2, 1)  # C and subprocess output too, not only print()
    sys.stdout = sys.stderr


def _release_forkserver() -> None:
    """A worker forked by the forkserver holds a copy of the command's end of the server's "alive" pipe (CPython
    hands it over for workers that start workers of their own; ours never do). While any worker held it, the
    server would never see the command die, so it would never exit and its workers would never get their
    parent-death signal: a killed command would leave its workers running. Closed here, the server ends with
    the command and takes its workers with it."""
    server: Any = multiprocessing.forkserver._forkserver  # CPython's one server; its fd is a private attribute
    fd = getattr(server, "_forkserver_alive_fd", None)
    if fd is not None:
        with contextlib.suppress(OSError):
            os.close(fd)
        server._forkserver_alive_fd = None


def _adopt_environment(environment: dict[str, str]) -> None:
    """A forked worker's environment is the forkserver's, from when it started (another command's settings, or
    none): take the command's environment as it is now, as a spawned worker would, and the thread counts its
    thread variables ask for (torch, NumPy's BLAS and OpenMP had read theirs when the server imported them)."""
    os.environ.clear()
    os.environ.update(environment)
    counts = {int(v) for name in THREAD_VARIABLES if (v := environment.get(name, "")).isdigit() and int(v) > 0}
    if not counts:
        return
    threads = min(counts)
    import torch

    torch.set_num_threads(threads)
    with contextlib.suppress(ImportError):
        from threadpoolctl import threadpool_limits

        threadpool_limits(threads)


def _worker_main(conn: Connection, memory_limit: int | None = None, environment: dict[str, str] | None = None,
                 command: tuple[int, int] | None = None) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    if environment is not None:  # forked by the forkserver
        _release_forkserver()
        _adopt_environment(environment)
        confinement.worker_dumpable()
    die_with_parent()
    parent, parent_group = os.getppid(), 0  # the command, or its forkserver
    with contextlib.suppress(OSError):
        parent_group = os.getpgid(parent)
    lead_own_session()
    if command is not None:  # before any plugin code: nothing the plugin runs may signal the command
        confinement.confine_worker((command[0], parent), (command[1], parent_group))
    _cap_memory(memory_limit)
    _own_streams()
    try:
        _serve(conn)
    except (BrokenPipeError, EOFError, ConnectionResetError):
        pass  # the parent is gone: nobody is waiting for an answer; exit quietly
    finally:
        _end_leftovers()  # a worker never leaves a plugin's processes behind it


def _serve(conn: Connection) -> None:
    while True:
        try:
            message = conn.recv()
        except EOFError:
            return
        if message is None:
            return
        fn, args, end_leftovers = message
        try:
            reply: tuple[Any, ...] = (OK, fn(*args), None, None)
        except BaseException as exc:  # noqa: BLE001 - every failure of plugin code is an outcome
            error = f"{type(exc).__name__}: {_text(exc)}"
            if _is_out_of_memory(exc):
                error = f"{OUT_OF_MEMORY}{_memory_note()}: {error}"
            reply = (ERROR, None, error, _text(traceback.format_exc))
        reply = streams.clip_strings(reply)  # a plugin's 50 MB message is a few KiB here, before it is sent
        scan_started = _CLOCK()
        left = _end_leftovers() if end_leftovers else ()  # else they live as long as the worker, and die with it
        scan_s = _CLOCK() - scan_started  # the harness's own time, not the task's: the parent takes it off
        try:
            conn.send((*reply, left, scan_s))
        except Exception as exc:  # noqa: BLE001 - an unpicklable result is the task's error, not the worker's death
            error = streams.clip(f"result could not be sent back: {type(exc).__name__}: {_text(exc)}")
            conn.send((ERROR, None, error, None, left, scan_s))


def _text(thing: object) -> str:
    """``str(thing)`` (or ``thing()``'s), or what stopped it: a plugin's exception may fail to say itself."""
    try:
        return str(thing() if callable(thing) and not isinstance(thing, BaseException) else thing)
    except Exception as exc:  # noqa: BLE001 - the message is the plugin's; its failure is said, not raised
        return f"<its message could not be read: {type(exc).__name__}>"


def _describe_death(exitcode: int | None, memory_limit: int | None = None) -> str:
    if exitcode is None:
        return "worker stopped answering"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        why = ""
        if exitcode == -signal.SIGKILL:  # nobody here sent it: the kernel's out-of-memory killer is the usual sender
            cap = f"its cap of {memory_limit / 2**30:.2f} GiB" if memory_limit else "no memory cap"
            why = f"; likely out of memory: the kernel's OOM killer ends processes with SIGKILL (the worker had {cap})"
        return f"worker killed by {name} (exit code {exitcode}){why}"
    note = ": plugin code ended its process (os._exit(0), say) instead of returning" if exitcode == 0 else ""
    return f"worker exited with code {exitcode} before answering{note}"


@contextlib.contextmanager
def main_script_hidden() -> Iterator[None]:
    """Start workers without making each one run this process's ``__main__`` script again.

    multiprocessing has every new worker (spawn, or forked by the forkserver) run the parent's main script as
    ``__mp_main__``, so that functions defined there can be unpickled. Task functions here are always importable
    from their modules, so a worker has no use for it, and it costs: a script read from stdin (``python3 -``) is
    not a file, so every worker died at start ("exited with code 1 before answering"); a script that calls
    attnbench at its top level, without an ``if __name__ == "__main__"`` guard, ran again in each worker; and in a
    Ray worker the script is Ray's ``default_worker.py``, whose import of Ray cost 0.35 s per worker started. With
    ``__file__`` hidden while a worker starts, multiprocessing records no main script to run."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if path is None or getattr(main, "__spec__", None) is not None:  # nothing to hide, or run with -m
        yield
        return
    del main.__file__  # type: ignore[union-attr]
    try:
        yield
    finally:
        main.__file__ = path  # type: ignore[union-attr]


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
    def start(cls, method: str = "spawn", memory_limit: int | None = None) -> _Worker:
        streams.fill_standard_fds()  # a closed stdout or stderr must not become the pipe's descriptor, or the worker's
        context = _context(method)
        parent, child = context.Pipe()
        forked = context.get_start_method() == "forkserver"
        process = context.Process(target=_worker_main, daemon=True,
                                  args=(child, memory_limit, dict(os.environ) if forked else None,
                                        confinement.command_ids()))
        # The resource tracker first: starting it unblocks SIGINT in this thread whatever the mask was.
        multiprocessing.resource_tracker.ensure_running()
        if forked:
            start_forkserver()  # with SIGINT blocked: the server, and so every worker it forks
            with main_script_hidden():
                process.start()  # waits for the server's preload: not in the block, so Ctrl-C stops it at once
        else:
            with _sigint_blocked(), main_script_hidden():
                process.start()
        child.close()
        worker = cls(process, parent)
        _LIVE.add(worker)
        return worker

    def __hash__(self) -> int:
        return id(self)

    def hold(self) -> None:
        """Stop the worker's whole tree until :meth:`resume` (or its end). Nothing waits for the stop to land: an idle
        worker only has to stop burning CPU, and on a busy machine each of its threads waits for a core to take it."""
        if self.process.pid is not None and self.process.is_alive():
            self.tree: Tree | None = Tree(self.process.pid)
            self.tree.signal(signal.SIGSTOP)

    def resume(self) -> None:
        tree = getattr(self, "tree", None)
        if tree is not None:
            tree.resume()
            self.tree = None

    def stop(self, kill: bool = False) -> None:
        self.resume()  # a held worker reads its last message only when it runs
        if not kill:
            try:
                self.conn.send(None)
            except (OSError, EOFError):
                pass
            self.process.join(timeout=5)
        if self.process.pid is not None:  # the worker, all it started, and its group (what a crash left)
            alive = self.process.is_alive()
            kill_tree(self.process.pid, include_root=alive, group=alive or kill)
        if self.process.is_alive():
            self.process.kill()
        self.process.join(timeout=5)
        self.conn.close()
        _LIVE.discard(self)


_LIVE: set[_Worker] = set()

FORKSERVER_PRELOAD = ["harness.runtime.forkserver_exit", "torch", "numpy", "harness.verify.checks", "torch.fx.experimental.symbolic_shapes"]
"""What a forkserver imports once, so each verify worker starts in milliseconds instead of seconds. The last is
what torch imports (SymPy with it) on a worker's first backward or ``nn.MultiheadAttention`` call: 0.3 s of CPU
in every worker otherwise."""


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


_COMMAND_PROCESS = False
"""Whether this process is the ``attnbench`` command itself (:func:`command_process`), not a host calling
:func:`harness.cli.main` (a test, a notebook), whose state a forked server must not carry."""


def command_process() -> None:
    """Mark this process as the command: :func:`start_forkserver` may fork the server from it."""
    global _COMMAND_PROCESS
    _COMMAND_PROCESS = True
    confinement.protect_command()


def start_forkserver(from_here: bool = False, huge_pages: bool = False) -> None:
    """Start the forkserver now, without waiting for it: its import of torch (:data:`FORKSERVER_PRELOAD`) runs on
    another core while this process loads the plugins, instead of after. The first worker waits for it as usual.

    ``from_here``: called before any plugin is loaded, so the server may be this process forked (see
    :func:`_forked_server`) instead of a new interpreter that imports torch a second time. ``huge_pages``: the
    server's workers time calls, so their heaps must be on huge pages (:data:`HUGE_PAGE_HEAPS`): forked only from a
    command that started with them (:func:`huge_page_heaps_by_exec`), else a new interpreter."""
    if "forkserver" not in mp.get_all_start_methods():
        return
    streams.fill_standard_fds()
    _context("forkserver")
    multiprocessing.resource_tracker.ensure_running()
    _short_socket_dir()
    forked = from_here and _may_fork_server() and (_HEAPS_ON_HUGE_PAGES or not huge_pages)
    with _sigint_blocked(), _forked_server() if forked else _huge_page_heaps():
        multiprocessing.forkserver.ensure_running()


HUGE_PAGE_HEAPS = "glibc.malloc.hugetlb=1"
"""The glibc tunable a forkserver started as a new interpreter runs with, and so every worker it forks: malloc
backs its heap and its large blocks with transparent huge pages (``madvise``). On 4 KiB pages a process's time per
call depends on where its buffers land: a fresh process ran one attention loop in 10, 13 or 17 ms, by the process
(a 2-core Intel Xeon VM with AMX, 1 thread, idle), and ``attnbench ab`` of a 1.3x head read 1.8-2.4x in 3 of 5 runs; with huge
pages, 1.19-1.41x in 5 of 5. glibc reads it once, at start; one without the tunable (before 2.35, or musl) ignores
it. Memory workers are spawned without it: their page-resolution high-water mark (:mod:`harness.bench.memory`)
would read whole huge pages."""


@contextlib.contextmanager
def _huge_page_heaps() -> Iterator[None]:
    """While the block runs, a new interpreter starts with :data:`HUGE_PAGE_HEAPS` added to the tunables it
    inherits."""
    before = os.environ.get("GLIBC_TUNABLES")
    os.environ["GLIBC_TUNABLES"] = f"{before}:{HUGE_PAGE_HEAPS}" if before else HUGE_PAGE_HEAPS
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("GLIBC_TUNABLES", None)
        else:
            os.environ["GLIBC_TUNABLES"] = before


_HEAP_MARK = "ATTNBENCH_TUNABLES_BEFORE"
"""Set across :func:`huge_page_heaps_by_exec`'s exec only: the ``GLIBC_TUNABLES`` the caller had."""
_HEAPS_ON_HUGE_PAGES = False
"""Whether this process started with :data:`HUGE_PAGE_HEAPS` (by :func:`huge_page_heaps_by_exec`): then a server
forked from it gives its workers huge-page heaps as a new interpreter's would."""


def huge_page_heaps_by_exec() -> None:
    """Make the ``attnbench`` command's own heap what a timing worker's must be (:data:`HUGE_PAGE_HEAPS`), so its
    forkserver can be the command forked instead of a new interpreter that imports torch a second time (1.6 s of
    CPU in every bench): exec the same command line once with the tunable added, then put the caller's
    ``GLIBC_TUNABLES`` back in the environment, so that what it spawns (memory workers, plugins' children) starts
    as the caller's would. Only where the command was started from a file or ``-m`` (a program read from stdin
    cannot be read twice), on Linux with glibc, and before anything else ran."""
    global _HEAPS_ON_HUGE_PAGES
    if _HEAP_MARK in os.environ:  # the exec'd command: the tunable is in effect; the caller's environment back
        _put_back(os.environ.pop(_HEAP_MARK))
        _HEAPS_ON_HUGE_PAGES = True
        return
    before = os.environ.get("GLIBC_TUNABLES")
    if (not sys.platform.startswith("linux") or not _glibc() or not os.path.isfile(sys.argv[0] or "")
            or HUGE_PAGE_HEAPS.split("=")[0] in (before or "")):
        return
    os.environ[_HEAP_MARK] = "unset" if before is None else f"set:{before}"
    os.environ["GLIBC_TUNABLES"] = f"{before}:{HUGE_PAGE_HEAPS}" if before else HUGE_PAGE_HEAPS
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execv(sys.executable, list(sys.orig_argv))
    except OSError:  # no exec: a server from a new interpreter gives the workers their huge pages instead
        _put_back(os.environ.pop(_HEAP_MARK))


def _put_back(mark: str) -> None:
    """The caller's ``GLIBC_TUNABLES`` from its mark ("unset", or "set:" and its value)."""
    if mark.startswith("set:"):
        os.environ["GLIBC_TUNABLES"] = mark[4:]
    else:
        os.environ.pop("GLIBC_TUNABLES", None)


def _glibc() -> bool:
    """Whether this interpreter runs on glibc (whose malloc reads the tunable)."""
    try:
        return os.confstr("CS_GNU_LIBC_VERSION") is not None
    except (ValueError, OSError):
        return False


def _may_fork_server() -> bool:
    """Linux, the command's own process, one thread, and no server yet: then a fork of this process is as clean
    a server as a new interpreter (no plugin is loaded yet; torch has run nothing, so no thread pool is up)."""
    import threading

    server: Any = multiprocessing.forkserver._forkserver  # CPython's one server
    return (sys.platform.startswith("linux") and _COMMAND_PROCESS and threading.active_count() == 1
            and getattr(server, "_forkserver_pid", None) is None)


@contextlib.contextmanager
def _forked_server() -> Iterator[None]:
    """Inside the block, multiprocessing starts its forkserver as a fork of this process instead of a new
    interpreter: the command imports torch and NumPy once (it would for its plugins anyway) and the server
    inherits them, which saves a second import of torch (about 1 s of CPU) in every verify and list.

    multiprocessing runs ``python -c CODE`` (CODE: the server's ``main`` with its socket, its pipe and the modules
    to preload) through ``util.spawnv_passfds``; here the fork runs the same CODE itself, after making itself what
    a new interpreter would be: only the standard streams and the passed descriptors open, the signal handlers
    this process installed back to their defaults, the objects it holds kept from the collector. It never returns
    to this process's code: it leaves with ``os._exit`` when the server ends."""
    import multiprocessing.util as util  # the module whose spawnv_passfds the forkserver calls

    import numpy  # noqa: F401 - the heavy part of the preload, imported here before the fork
    import torch  # noqa: F401

    spawn = util.spawnv_passfds
    util.spawnv_passfds = _fork_in_place
    try:
        yield
    finally:
        util.spawnv_passfds = spawn


def _fork_in_place(path: Any, args: Sequence[Any], passfds: Sequence[int]) -> int:
    """``util.spawnv_passfds`` for :func:`_forked_server`: fork, and run ``args``' ``-c`` code in the child."""
    import gc
    import warnings

    code = str(args[list(args).index("-c") + 1])
    keep = {0, 1, 2, *(int(fd) for fd in passfds)}
    with warnings.catch_warnings():  # Python 3.12+ warns of fork beside OpenBLAS's idle threads, as CPython's own forkserver forks
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid:
        return pid
    status = 0
    try:
        gc.freeze()  # objects of the command's that hold descriptors closed below are never finalised here
        for name in os.listdir("/proc/self/fd"):
            if int(name) not in keep:
                with contextlib.suppress(OSError):
                    os.close(int(name))
        for signum in signal.valid_signals():
            with contextlib.suppress(OSError, ValueError):
                if callable(signal.getsignal(signum)) and signum != signal.SIGINT:
                    signal.signal(signum, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        exec(code, {"__name__": "__mp_main__"})  # multiprocessing's own server command, as `python -c` would run it
    except SystemExit as end:
        status = end.code if isinstance(end.code, int) else 0
    except BaseException:  # noqa: BLE001 - as a server started by a new interpreter would: the traceback, exit 1
        traceback.print_exc()
        status = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        os._exit(status)


def kill_all_workers() -> None:
    """Kill every worker of this process at once (Ctrl-C): a task still running in one is abandoned.

    Threads waiting on those workers get an end-of-file and return; their callers must check
    whether the run was stopped before they record the outcome as a crash.
    """
    for worker in list(_LIVE):
        if worker.process.pid is not None and worker.process.is_alive():
            kill_tree(worker.process.pid, include_root=True, group=True)


@dataclass
class WorkerPool:
    """Runs tasks in one worker at a time (timing on two cores must not compete with itself)."""

    timeout: float = DEFAULT_TIMEOUT_S
    start_method: str = "spawn"
    """"spawn" or "forkserver" (see :func:`_context`)."""
    memory_limit: int | None = None
    """Bytes of data each worker may allocate (None: no cap); see :func:`_cap_memory`."""
    held: bool = False
    """Hold the worker's whole process tree stopped between tasks (``SIGSTOP``; continued for the next): a plugin's
    thread or child can burn no CPU while the worker is idle, so an idle contender never slows the one being timed."""
    starts: int = field(default=0, init=False)
    """Workers this pool has started: a caller that prepares a worker once (bench's warm-up) tells by it whether
    the worker now up is the one it prepared, whatever task started it."""
    _worker: _Worker | None = field(default=None, repr=False)

    def run(self, task: Task) -> Outcome:
        if self._worker is None or not self._worker.process.is_alive():
            self._worker = _Worker.start(self.start_method, self.memory_limit)
            self.starts += 1
        worker = self._worker
        limit = min(self.timeout if task.timeout is None else task.timeout, LONGEST_WAIT_S)
        started = _CLOCK()
        if self.held:
            worker.resume()
        try:
            worker.conn.send((task.fn, task.args, task.end_leftovers))
            answered = worker.conn.poll(limit)
            if answered:
                status, value, error, trace, left, scan_s = _receive(worker.conn)
                # the scan's own time, as the worker says, but never more than a scan takes: a worker that
                # claimed more would shrink the wall time bench holds its accounting against
                scan_s = min(max(float(scan_s), 0.0), LONGEST_SCAN_S)
                outcome = Outcome(status, value, error, trace, _CLOCK() - started - scan_s, leftovers=left)
                if error and error.startswith(OUT_OF_MEMORY):  # what leaked stays with this worker: a fresh one next
                    self._discard(kill=True)
                elif self.held:
                    worker.hold()
                return outcome
        except AnswerTooLarge as exc:
            self._discard(kill=True)
            return Outcome(ERROR, error=str(exc), seconds=_CLOCK() - started)
        except (EOFError, OSError, BrokenPipeError):
            worker.process.join(timeout=5)
            self._discard(kill=True)
            return Outcome(CRASH, error=_describe_death(worker.process.exitcode, self.memory_limit),
                           seconds=_CLOCK() - started)
        self._discard(kill=True)
        return Outcome(TIMEOUT, error=f"no answer within {limit:g} s; worker killed",
                       seconds=_CLOCK() - started)

    @property
    def pid(self) -> int | None:
        """The process id of the worker now up (None: none is)."""
        return self._worker.process.pid if self._worker is not None else None

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


MAX_ANSWER_BYTES = 1 << 30
"""The most the parent reads of one answer from a worker (1 GiB); a longer one is that task's error, and the
worker is stopped (what is left of its message stays in its pipe). Text in an answer is cut far shorter in
the worker already (:data:`harness.runtime.streams.MESSAGE_LIMIT_BYTES`)."""


class AnswerTooLarge(Exception):
    """A worker's answer longer than :data:`MAX_ANSWER_BYTES`."""


def _receive(conn: Connection) -> Any:
    try:
        raw = conn.recv_bytes(MAX_ANSWER_BYTES)
    except OSError as exc:
        if "bad message length" in str(exc):
            raise AnswerTooLarge(f"the worker's answer was longer than {MAX_ANSWER_BYTES >> 20} MiB; "
                                 "worker stopped") from None
        raise
    return multiprocessing.reduction.ForkingPickler.loads(raw)


def run_isolated(
    tasks: Iterable[Task], on_outcome: Callable[[Task, Outcome], None], *, timeout: float = DEFAULT_TIMEOUT_S,
) -> None:
    """Run every task in a worker (restarted after a crash or timeout); report each outcome as it comes."""
    with WorkerPool(timeout=timeout) as pool:
        for task in tasks:
            on_outcome(task, pool.run(task))
