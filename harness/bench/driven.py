"""Timed calls driven by the parent: inputs written, clock read and outputs read where no plugin code runs.

The timing worker runs plugin code, so nothing decided inside it can be trusted: not its clock, not its
checks, not the samples it would report. So for a CPU kernel cell the worker only *serves* calls, and the
parent (bench's process, which never runs plugin code) does the rest:

- **Inputs.** The arrays of q, k and v that a call reads live in shared memory (a ``memfd`` the worker makes
  and hands over, one per array's storage, in the implementation's own layout). Before every call the parent
  writes that call's values there itself: the set's values plus full-rank noise from a seed the parent drew
  from its own entropy (:mod:`harness.bench.fresh`). The parent draws the sets' values itself too
  (:func:`harness.bench.audit.draw_sets`, deterministic), so nothing the worker says decides what a call sees.
- **A stopped worker between calls.** After each call the parent stops the worker's whole process tree
  (``SIGSTOP`` to its process group and to every process below it, then waits until every thread reads
  stopped in ``/proc``) and continues it only to serve the next call. So no thread of the plugin runs while the
  parent writes the next inputs or reads the last outputs: work before the call has no inputs to work on,
  and work after it is not there when the outputs are read.
- **The clock.** A sample is the parent's own clock from just before it continues the worker (and says go)
  to the moment every thread of the tree is stopped again after the worker said done; on the CPU clock, the
  CPU time the kernel counted for the tree over the same span (read while it is stopped, so exactly). The
  median of null calls (the same round trip; the worker copies its last output again) is taken off.
- **Outputs.** The worker copies what the call returned into shared memory (in the timed span: the null calls
  pay the same copy); the parent fingerprints it there while the worker is stopped
  (:mod:`harness.bench.fingerprint`) and checks the calls it draws after the last one against float64
  (:mod:`harness.bench.audit`) on the values it wrote.

The two ends of one protocol, read together: the worker's :func:`serve` and the parent's :class:`Drive`.
Messages are single packets on a Unix ``SOCK_SEQPACKET`` connection the worker opens to the parent's socket,
in a directory only this user can enter, with the run's random key; the parent holds the connection's peer
(``SO_PEERCRED``) to the timing worker it started. Nothing the worker sends is unpickled: its descriptions of
shared arrays are JSON, checked against what the parent expects before any byte is written.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import mmap
import os
import random
import socket
import struct
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from harness.bench import fingerprint as fp
from harness.bench.fingerprint import Print
from harness.bench.fresh import Fresh
from harness.bench.timing import TimingConfig
from harness.runtime.process_tree import Tree

KEY_BYTES = 16
NULL_CALLS = 5
"""Null calls a round makes (the first round three times as many): their median is the round trip's own cost."""
CALL, NULL, PROFILE, END = b"c", b"n", b"p", b"q"
DONE, LAID_OUT, UNTYPED = b"d", b"l", b"u"
MAX_MESSAGE = 1 << 16
ACCEPT_WAIT_S = 120.0
"""The longest the parent waits for the worker to connect: its set-up (inputs, a compile) comes first."""
JOIN_WAIT_S = 10.0
"""The longest the parent waits for its side of a task's calls once the task has answered (it is done by then)."""
_ENTROPY = random.SystemRandom()
_SO_PEERCRED = getattr(socket, "SO_PEERCRED", 17)


# ----------------------------------------------------------------------------------------- shared arrays

def _memfd(nbytes: int) -> tuple[int, mmap.mmap]:
    fd = os.memfd_create("attnbench-array", getattr(os, "MFD_CLOEXEC", 1))
    os.ftruncate(fd, max(nbytes, 1))
    return fd, mmap.mmap(fd, max(nbytes, 1))


def _typed(buf: Any, kind: str, dtype: str, shape: list[int], strides: list[int], offset: int) -> Any:
    """The array ``(kind, dtype, shape, strides, offset)`` over ``buf``: torch strides and offset in elements,
    NumPy's in bytes, as each library counts them. Out of the buffer's bounds: the library raises."""
    if kind == "numpy":
        return np.ndarray(tuple(shape), np.dtype(dtype), buffer=buf, offset=offset, strides=tuple(strides))
    torch_dtype = getattr(torch, dtype)
    if not isinstance(torch_dtype, torch.dtype):
        raise ValueError(f"not a torch dtype: {dtype!r}")
    raw = torch.frombuffer(buf, dtype=torch.uint8)
    item = torch.empty(0, dtype=torch_dtype).element_size()
    flat = raw[: raw.numel() // item * item].view(torch_dtype)
    return flat.as_strided(tuple(shape), tuple(strides), offset)


def _describe(x: Any) -> dict[str, Any]:
    if isinstance(x, np.ndarray):
        return {"kind": "numpy", "dtype": x.dtype.str, "shape": [int(n) for n in x.shape],
                "strides": [int(n) for n in x.strides]}
    return {"kind": "torch", "dtype": str(x.dtype).removeprefix("torch."), "shape": list(x.shape),
            "strides": list(x.stride())}


def _share(x: Any) -> tuple[int, mmap.mmap, Any, dict[str, Any]]:
    """``x`` copied, with the whole buffer behind it, into a new memfd: (fd, its mapping, the copy in ``x``'s
    layout over it, its description)."""
    described = _describe(x)
    if isinstance(x, np.ndarray):
        root = x
        while isinstance(root.base, np.ndarray):
            root = root.base
        offset = x.__array_interface__["data"][0] - root.__array_interface__["data"][0]
        whole = np.ascontiguousarray(root).view(np.uint8).reshape(-1)
        fd, buf = _memfd(whole.nbytes)
        np.frombuffer(buf, dtype=np.uint8, count=whole.nbytes)[:] = whole
    else:
        storage = x.untyped_storage()
        offset = x.storage_offset()
        whole_t = torch.empty(0, dtype=torch.uint8).set_(storage)
        fd, buf = _memfd(whole_t.numel())
        if whole_t.numel():
            torch.frombuffer(buf, dtype=torch.uint8, count=whole_t.numel()).copy_(whole_t)
    described["offset"] = int(offset)
    return fd, buf, _typed(buf, described["kind"], described["dtype"], described["shape"], described["strides"],
                           offset), described


@dataclass
class SharedInputs:
    """The worker's shared copies of one input set's redrawn arrays: what its prepared call reads."""

    names: tuple[str, ...] = ()
    fds: list[int] = field(default_factory=list)
    maps: list[mmap.mmap] = field(default_factory=list)
    described: list[dict[str, Any]] = field(default_factory=list)


def share_arrays(arrays: list[Any], names: tuple[str, ...]) -> tuple[list[Any], SharedInputs]:
    """``arrays`` with each of those named (one array may be named several times: self-attention) replaced by a
    copy in shared memory, laid out as it was; the worker's record of them, to hand to the parent."""
    shared, record, made = list(arrays), SharedInputs(names), {}
    for name in names:
        i = {"q": 0, "k": 1, "v": 2}[name]
        x = arrays[i]
        if id(x) not in made:
            fd, buf, copy, described = _share(x)
            made[id(x)] = copy
            record.fds.append(fd)
            record.maps.append(buf)
            record.described.append({"name": name, **described})
        shared[i] = made[id(x)]
    return shared, record


# ----------------------------------------------------------------------------------------- the worker's end

def connect(ticket: tuple[str, bytes]) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    sock.connect(ticket[0])
    sock.sendall(ticket[1])
    return sock


class Server:
    """The worker's side of one cell: its input sets' shared arrays and the output it publishes, across rounds."""

    def __init__(self, calls: list[Callable[[], Any]], shared: list[SharedInputs]) -> None:
        self.calls, self.shared = calls, shared
        self.out_maps: list[mmap.mmap] = []
        self.out_views: list[Any] = []
        self.layouts: list[dict[str, Any] | None] = []
        self.last: tuple[Any, ...] | None = None
        self.announced = False

    def hello(self, sock: socket.socket) -> None:
        """The shared inputs (sent once per cell, with their descriptors), or a plain hello in a later round."""
        if self.announced:
            sock.send(json.dumps({"sets": None}).encode())
            return
        fds = [fd for s in self.shared for fd in s.fds]
        sets = [s.described for s in self.shared]
        socket.send_fds(sock, [json.dumps({"sets": sets}).encode()], fds)
        for s in self.shared:
            for fd in s.fds:
                os.close(fd)
            s.fds.clear()
        self.announced = True

    def _publish(self, sock: socket.socket, parts: tuple[Any, ...]) -> None:
        """The call's output copied into shared memory (new segments first when its layout changed), then "done"."""
        if not all(p is None or type(p) in (torch.Tensor, np.ndarray) for p in parts):
            sock.send(UNTYPED)
            return
        fds = [] if self._same_layout(parts) else self._lay_out(parts)
        for p, view in zip(parts, self.out_views):
            if p is not None:
                np.copyto(_numpy(view), _numpy(p))
        if fds:
            socket.send_fds(sock, [LAID_OUT + json.dumps(self.layouts).encode()], fds)
            for fd in fds:
                os.close(fd)
        else:
            sock.send(DONE)

    def _same_layout(self, parts: tuple[Any, ...]) -> bool:
        return len(parts) == len(self.out_views) and all(
            (p is None) == (v is None) and (p is None or (tuple(p.shape) == tuple(v.shape) and p.dtype == v.dtype))
            for p, v in zip(parts, self.out_views))

    def _lay_out(self, parts: tuple[Any, ...]) -> list[int]:
        """New contiguous shared segments for an output shaped as ``parts``; their descriptors, to send."""
        self.out_maps, self.out_views, self.layouts = [], [], []
        fds = []
        for p in parts:
            if p is None:
                self.out_views.append(None)
                self.layouts.append(None)
                continue
            described = _describe(p)
            nbytes = p.nbytes if isinstance(p, np.ndarray) else p.numel() * p.element_size()
            fd, buf = _memfd(nbytes)
            fds.append(fd)
            self.out_maps.append(buf)
            strides = _contiguous(p.shape)
            if isinstance(p, np.ndarray):
                strides = [p.dtype.itemsize * n for n in strides]
            self.out_views.append(_typed(buf, described["kind"], described["dtype"], described["shape"], strides, 0))
            self.layouts.append({**described, "strides": strides, "offset": 0})
        return fds

    def serve(self, sock: socket.socket, profile: Callable[[Callable[[], Any]], Any] | None) -> tuple[Any, bool]:
        """Calls as the parent asks for them, until it says end: (the profile of a profiled call, whether the
        parent said the cell is done)."""
        profiled = None
        while True:
            message = sock.recv(64)
            if not message:
                raise EOFError("the parent closed the connection before the end of the task")
            if message[:1] == END:
                return profiled, message[1:2] == b"1"
            tag = message[:1]
            if tag == NULL:
                self._publish(sock, self.last or ())
                continue
            call = self.calls[int.from_bytes(message[1:5], "little") % len(self.calls)]
            if tag == PROFILE and profile is not None:
                holder: list[Any] = []
                profiled = profile(functools.partial(_kept_call, call, holder))
                out = holder[-1] if holder else None
            else:
                out = call()
            self.last = fp.parts(out)
            del out
            self._publish(sock, self.last)


def _numpy(x: Any) -> np.ndarray:
    """``x``'s memory as NumPy sees it (bfloat16 as its 16-bit patterns): the output is copied by one thread, with
    no torch operator, so the copy never waits on a thread pool a busy machine has descheduled."""
    if isinstance(x, np.ndarray):
        return x
    x = x.detach()
    array: np.ndarray = (x.view(torch.int16) if x.dtype == torch.bfloat16 else x).numpy()
    return array


def _kept_call(call: Callable[[], Any], holder: list[Any]) -> Any:
    holder.append(call())
    return holder[-1]


def _contiguous(shape: Any) -> list[int]:
    strides, step = [], 1
    for n in reversed(list(shape)):
        strides.append(step)
        step *= max(int(n), 1)
    return list(reversed(strides))


# ----------------------------------------------------------------------------------------- the parent's end

class Listener:
    """The parent's listening socket, in a directory only this user can enter; one per bench run."""

    def __init__(self) -> None:
        self.key = os.urandom(KEY_BYTES)
        self.folder = tempfile.mkdtemp(prefix="attnbench-d")
        os.chmod(self.folder, 0o700)
        self.address = os.path.join(self.folder, "calls")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock.bind(self.address)
        self.sock.listen(4)

    def ticket(self) -> tuple[str, bytes]:
        return self.address, self.key

    def accept(self, worker_pid: Callable[[], int | None], cancelled: Callable[[], bool],
               wait_s: float = ACCEPT_WAIT_S) -> socket.socket | None:
        """The timing worker's connection (its key, and the kernel's word that it is the worker), or None once
        ``cancelled`` (the task answered without connecting) or after ``wait_s``."""
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and not cancelled():
            self.sock.settimeout(max(0.01, min(0.1, deadline - time.monotonic())))
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return None
            conn.settimeout(wait_s)
            try:
                key = conn.recv(KEY_BYTES)
                pid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, _SO_PEERCRED, 12))[0]
            except OSError:
                conn.close()
                continue
            if key == self.key and pid == worker_pid():
                conn.settimeout(None)
                return conn
            conn.close()
        return None

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()
        import shutil

        shutil.rmtree(self.folder, ignore_errors=True)


@dataclass
class ParentSet:
    """One input set as the parent holds it: its own draw of the values, and the worker's shared arrays the
    parent writes each call's values into."""

    inputs: Any
    fresh: Fresh | None
    named: list[tuple[str, Any]]
    maps: list[mmap.mmap] = field(default_factory=list)
    leaves: tuple[Any, Any, Any] | None = None
    """A backward's (q, k, v), as the float64 check reads them where they are not redrawn."""
    grad_out: Any = None
    """A backward's upstream gradient, drawn as the worker draws it for the set."""


@dataclass
class Drive:
    """One cell's calls as the parent drives them, kept across its rounds: the sets, the samples on the parent's
    clock, every call's fingerprint, and how the rounds went."""

    sets: list[ParentSet]
    config: TimingConfig
    clock: str = "wall"
    profile: bool = False
    rounds: int = 1
    samples: list[float] = field(default_factory=list)
    raw: list[float] = field(default_factory=list)
    nulls: list[float] = field(default_factory=list)
    prints: list[Print] = field(default_factory=list)
    untyped: list[int] = field(default_factory=list)
    round_sizes: list[int] = field(default_factory=list)
    per_call_s: float = 0.0
    calls: int = 0
    outs: list[Any] = field(default_factory=list)
    out_maps: list[mmap.mmap] = field(default_factory=list)
    problem: str | None = None
    written: str | None = None

    @property
    def done(self) -> bool:
        return len(self.round_sizes) >= self.rounds

    # --- one connection's round
    def attach(self, conn: socket.socket) -> None:
        """The worker's hello: on a cell's first round, its shared arrays, checked against the parent's own."""
        message, fds, _, _ = socket.recv_fds(conn, MAX_MESSAGE, 64)
        try:
            sets = json.loads(message.decode())["sets"]
            if sets is None:
                if any(s.fresh is not None and not s.maps for s in self.sets):
                    raise ValueError("the worker did not share the inputs it was to receive")
                return
            self._attach_sets(sets, fds)
        finally:
            for fd in fds:
                with contextlib.suppress(OSError):
                    os.close(fd)

    def _attach_sets(self, described: list[list[dict[str, Any]]], fds: list[int]) -> None:
        if len(described) != len(self.sets):
            raise ValueError(f"the worker shared {len(described)} input sets, the parent drew {len(self.sets)}")
        it = iter(fds)
        for s, arrays in zip(self.sets, described):
            wanted = set(s.fresh.names) if s.fresh is not None else set()
            got = {a["name"]: a for a in arrays}
            if not wanted <= set(got):
                raise ValueError(f"the worker shared {sorted(got)}, not the arrays {sorted(wanted)} redrawn every call")
            views = {}
            for a in arrays:
                fd = next(it)
                buf = _map_memfd(fd)
                s.maps.append(buf)
                views[a["name"]] = _typed(buf, a["kind"], a["dtype"], a["shape"], a["strides"], int(a["offset"]))
            if s.fresh is not None:
                live = []
                for name, own in zip(s.fresh.names, s.fresh.live):
                    view = views[name]
                    if tuple(view.shape) != tuple(own.shape) or str(view.dtype) != str(own.dtype):
                        raise ValueError(f"the worker's shared {name} is {tuple(view.shape)} {view.dtype}, "
                                         f"the case's is {tuple(own.shape)} {own.dtype}")
                    live.append(view)
                s.fresh.live = live

    def _take_outputs(self, reply: bytes, fds: list[int]) -> None:
        if reply[:1] == LAID_OUT:
            layouts = json.loads(reply[1:].decode())
            self.outs, self.out_maps = [], []
            it = iter(fds)
            for d in layouts:
                if d is None:
                    self.outs.append(None)
                    continue
                buf = _map_memfd(next(it))
                self.out_maps.append(buf)
                self.outs.append(_typed(buf, d["kind"], d["dtype"], d["shape"], d["strides"], int(d["offset"])))

    def _exchange(self, conn: socket.socket, worker: Tree, message: bytes) -> tuple[float, bytes]:
        """One round trip on the parent's clock, from just before the worker continues to its "done": (seconds on
        the cell's clock, the worker's reply). The output is digested at "done" and again once the tree reads
        stopped: an output that changed in between was written after the worker said it was done, work outside the
        sample, and is a violation. (Waiting for the stop inside the sample would time the scheduler: on a busy
        machine every thread must get a core once to take it.)"""
        cpu0 = worker.cpu_s() if self.clock == "cpu" else 0.0
        t0 = time.perf_counter()
        worker.resume()
        conn.send(message)
        reply, fds, _, _ = socket.recv_fds(conn, MAX_MESSAGE, 16)
        t1 = time.perf_counter()
        try:
            if not reply:
                worker.stop()
                raise EOFError("the worker closed the connection")
            self._take_outputs(reply, fds)
            said_done = self._digest()
            worker.stop()
        finally:
            for fd in fds:
                with contextlib.suppress(OSError):
                    os.close(fd)
        if self._digest() != said_done and self.problem is None:
            self.problem = ("the output changed after the worker said the call was done: work outside the timed "
                            "span, written into the output the parent reads")
        spent = (worker.cpu_s() - cpu0) if self.clock == "cpu" else (t1 - t0)
        return spent, reply

    def _digest(self) -> bytes:
        digest = hashlib.blake2b(digest_size=16)
        for buf in self.out_maps:
            digest.update(buf)
        return digest.digest()

    def _call(self, conn: socket.socket, worker: Tree, index: int, timed: bool, profiled: bool = False) -> float:
        s = self.sets[index % len(self.sets)]
        seed = None
        if s.fresh is not None:
            seed = _ENTROPY.getrandbits(63)
            s.fresh.lay_out(seed)
        tag = PROFILE if profiled else CALL
        spent, reply = self._exchange(conn, worker, tag + (index % len(self.sets)).to_bytes(4, "little"))
        written = s.fresh.written() if s.fresh is not None else []
        if written and self.written is None:
            self.written = (f"a call wrote into its input(s) {', '.join(written)}: a call may read its inputs, never "
                            "write them")
        if timed:
            i = len(self.prints)
            record = Print(index=i, set_index=index % len(self.sets), seed=seed, vectors=(), prints=(), dtypes=())
            if reply[:1] == UNTYPED:
                self.untyped.append(i)
                record.untyped = True
                record.problem = "it returned something that is not an exact torch.Tensor or numpy.ndarray (nothing of it was read)"
            else:
                record.vectors, record.prints = fp.fingerprint(tuple(self.outs), _ENTROPY.getrandbits(63))
                record.dtypes = fp.dtypes(tuple(self.outs))
                if written:
                    record.problem = self.written
            self.prints.append(record)
        return spent

    def round(self, conn: socket.socket, worker: Tree, rounds: int | None = None) -> list[float]:
        """The next round: its null calls, warm-up and timed calls, by :class:`~harness.bench.loop.RoundedLoop`'s
        rule (the parent's clock now): the first round warms up for ``warmup_s``, a later one for a ``rounds``-th
        of it, and every round for one call at least (its first call after the other contenders and the roof
        probe ran pays for what they left in the caches and the scheduler: 1.3x the cell's median at the 75th
        percentile, on the quick suite of a 2-core Zen 5); each round takes ``budget_s / rounds`` of timed calls
        and its share of ``min_samples``."""
        if rounds is not None:
            self.rounds = max(rounds, len(self.round_sizes) + 1)
        config, first_round = self.config, not self.round_sizes
        worker.stop()
        for _ in range(NULL_CALLS * (3 if first_round else 1)):
            if self.outs or not first_round:
                self.nulls.append(self._exchange(conn, worker, NULL)[0])
        limit = config.warmup_s if first_round else config.warmup_s / self.rounds
        started, warm = time.perf_counter(), 0
        while warm < 1 or (time.perf_counter() - started < limit
                                             and time.perf_counter() - started + self.per_call_s <= limit):
            self._call(conn, worker, self.calls, timed=False, profiled=self.profile and first_round and warm == 0)
            self.calls += 1
            warm += 1
        spent_warm = time.perf_counter() - started
        if first_round:
            self.per_call_s = spent_warm / max(warm, 1)
            for _ in range(NULL_CALLS * 3):  # now that an output exists to copy
                self.nulls.append(self._exchange(conn, worker, NULL)[0])
        left = self.rounds - len(self.round_sizes)
        least = max(1, -(-max(0, config.min_samples - len(self.samples)) // left))
        most = max(least, -(-max(0, config.max_samples - len(self.samples)) // left))
        budget, spent, taken = config.budget_s / self.rounds, 0.0, 0
        round_started = time.perf_counter()
        while taken < least or (taken < most and spent < budget):
            self.raw.append(self._call(conn, worker, self.calls, timed=True))
            self.calls += 1
            taken += 1
            spent = time.perf_counter() - round_started
        # the fastest null call is the round trip's own cost: a call's trip costs at least that (a busy machine
        # adds to it), so taking it off never makes a call look faster than its work
        null = min(self.nulls) if self.nulls else 0.0
        new = [max(r - null, 0.0) for r in self.raw[len(self.samples):]]
        self.samples.extend(new)
        self.round_sizes.append(taken)
        return new

    def kept(self) -> list[Print]:
        """The calls to check, drawn now that the last has returned, and the first call with each problem."""
        chosen = fp.choose(len(self.prints), _ENTROPY) if self.done else []
        if self.written is not None and self.prints and not any(p.problem == self.written for p in self.prints):
            self.prints[0].problem = self.prints[0].problem or self.written  # a warm-up call wrote it: untimed, not allowed
        kept = [self.prints[i] for i in chosen]
        seen = {p.problem for p in kept}
        for p in self.prints:
            if p.problem and p.problem not in seen:
                seen.add(p.problem)
                kept.append(p)
        return sorted(kept, key=lambda p: p.index)

    def close(self) -> None:
        for s in self.sets:
            s.maps.clear()
        self.outs, self.out_maps = [], []


def _map_memfd(fd: int) -> mmap.mmap:
    """A descriptor the worker sent, mapped: only an anonymous memory file (a ``memfd``), never a file of the
    user's that the parent would then write into."""
    target = os.readlink(f"/proc/self/fd/{fd}")
    if not target.startswith("/memfd:"):
        raise ValueError(f"the worker sent a descriptor of {target!r}, not a memory file")
    return mmap.mmap(fd, os.fstat(fd).st_size)


@contextlib.contextmanager
def driving(listener: Listener, worker_pid: Callable[[], int | None], work: Callable[[socket.socket, Tree], bool]
            ) -> Iterator[dict[str, Any]]:
    """Run ``work`` (the parent's side of a task's calls) in a thread while the caller waits for the task's answer;
    the thread's error, if any, in the yielded dict under "error". The worker is always left running."""
    outcome: dict[str, Any] = {"error": None, "refused": False, "answered": False, "conn": None}

    def run() -> None:
        conn = listener.accept(worker_pid, lambda: bool(outcome["answered"]))
        outcome["conn"] = conn
        if conn is None:
            outcome["error"] = "the timing worker never connected to serve its calls"
            return
        worker = Tree(struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, _SO_PEERCRED, 12))[0])
        try:
            final = work(conn, worker)
            worker.resume()
            conn.send(END + (b"1" if final else b"0"))
        except (EOFError, OSError) as exc:  # the worker went away or failed: its own outcome says why
            worker.resume()
            outcome["error"], outcome["refused"] = f"{type(exc).__name__}: {exc}", False
        except Exception as exc:  # noqa: BLE001 - the parent refused what the worker sent: the cell's error
            worker.resume()
            outcome["error"], outcome["refused"] = f"{type(exc).__name__}: {exc}", True
        finally:  # never a resume here: the pool may be holding the worker stopped by now
            with contextlib.suppress(OSError):
                conn.close()

    thread = threading.Thread(target=run, name="attnbench-drive", daemon=True)
    thread.start()
    try:
        yield outcome
    except BaseException:  # interrupted or stopped: end the conversation at once, whatever the worker is doing
        conn = outcome.get("conn")
        if conn is not None:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        raise
    finally:
        outcome["answered"] = True
        thread.join(timeout=JOIN_WAIT_S)
