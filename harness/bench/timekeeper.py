"""A second clock on every timed call, kept outside the worker: the worker's clock is not the only witness.

The timing worker runs plugin code, so anything in it (its clock, the timer its loop calls, the C
library's ``clock_gettime``) can be patched by a plugin. So every timed call is also stamped by the
kernel: the worker sends a message just before a call starts and one just after it returns, over a
Unix ``SOCK_SEQPACKET`` connection to a socket the parent (which runs no plugin code) listens on, with
``SO_TIMESTAMPNS`` set, and the kernel stamps each message as it is sent. The parent reads them only
after the task has answered, so no reader is woken mid-loop, and the stamp is the kernel's clock at
the send however late it is read. (A datagram socket would stamp the same, but its queue holds 10
messages, so a sender would wait for a late reader and its stamps with it; a connection queues what its
send buffer holds, :data:`SEND_BUFFER`: thousands of calls.) Each message carries the run's random key
(the socket is in a directory only this user can enter). The span between a call's two stamps is the
kernel's measure of the call, the same for every call; a null call (two messages with nothing between),
the median of :data:`NULL_CALLS`, is the sends' own cost and is taken off.

Cells timed on the CPU clock (``--clock cpu``, or ``auto`` for one-thread CPU cells) are measured by the
worker's CPU time, which a wall-clock span cannot check on a busy machine (a preempted call's span grows,
its CPU time does not). Their tasks connect to a second socket whose connections are read as messages
arrive: each start and end waits for the parent's answer, and the parent, before answering, reads the
worker's CPU clock itself, the kernel's per-process CPU clock of the peer the socket names
(``SO_PEERCRED``). The kernel keeps that clock, so no patch inside the worker moves it, and the worker,
blocked on the answer, spends no CPU while it is read (a reader woken mid-loop costs wall time, which
these cells do not measure).

The parent holds the spans against the worker's samples (:mod:`harness.bench.verdicts`): a worker
whose samples add up to less than :data:`~harness.bench.verdicts.STAMP_SHARE` of what the kernel
stamped had its clock slowed, whatever it did to it.
"""

from __future__ import annotations

import os
import shutil
import socket
import statistics
import struct
import tempfile
import threading
import time
from collections.abc import Callable

START, END, FLUSH = b"s", b"e", b"f"
SYNCED = {b"S": START, b"E": END}
"""Start and end messages the worker waits on: the parent reads the worker's CPU clock before it answers."""
ANSWER = b"a"
NULL_CALLS = 15
FLUSH_WAIT_S = 5.0
"""The longest the parent waits for a task's stamps to arrive after its answer did."""
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
"""Linux's option number where Python does not name it."""
KEY_BYTES = 16
SEND_BUFFER = 1 << 22
"""Bytes of messages a worker may queue while the parent's reading thread waits for a core (thousands of calls)."""

Stamp = tuple[bytes, float, "float | None", "float | None"]
"""(tag, the kernel's wall-clock stamp of the send, the worker's CPU seconds and its calling thread's, both read
by the parent, or None)."""


def _listen(address: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    sock.bind(address)
    sock.listen(8)
    return sock


class Timekeeper:
    """Parent side: listening sockets whose connections the kernel stamps every message on."""

    def __init__(self) -> None:
        self.key = os.urandom(KEY_BYTES)
        self.folder = tempfile.mkdtemp(prefix="attnbench-t")
        os.chmod(self.folder, 0o700)
        self.address = os.path.join(self.folder, "stamps")
        self.cpu_address = os.path.join(self.folder, "cpu")
        self.sock, self.cpu_sock = _listen(self.address), _listen(self.cpu_address)
        self.stamps: list[Stamp] = []
        self.connections: list[socket.socket] = []
        self.lock = threading.Condition()
        for sock, take in ((self.sock, self._keep), (self.cpu_sock, self._serve_in_thread)):
            threading.Thread(target=self._accept, args=(sock, take), daemon=True, name="attnbench-timekeeper").start()

    @property
    def ticket(self) -> tuple[str, bytes, str]:
        """What a task needs to send its stamps here (picklable), stamped on the wall clock."""
        return self.address, self.key, "wall"

    def ticket_for(self, clock: str) -> tuple[str, bytes, str]:
        """A ticket whose calls are stamped on ``clock`` too: "cpu" has the parent read the worker's CPU clock."""
        return (self.cpu_address, self.key, "cpu") if clock == "cpu" else self.ticket

    def _accept(self, sock: socket.socket, take: Callable[[socket.socket], None]) -> None:
        """Accept ``sock``'s connections, kernel stamps on, and hand each to ``take``."""
        while True:
            try:
                conn, _ = sock.accept()
            except OSError:
                return
            conn.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            take(conn)

    def _keep(self, conn: socket.socket) -> None:
        """A wall-clock connection: drained after its task answered (:meth:`take`)."""
        with self.lock:
            self.connections.append(conn)
            self.lock.notify_all()

    def _serve_in_thread(self, conn: socket.socket) -> None:
        """A CPU-clock connection: read as its messages arrive (:meth:`_serve_cpu`)."""
        threading.Thread(target=self._serve_cpu, args=(conn,), daemon=True).start()

    def _stamped(self, data: bytes, ancillary: list[tuple[int, int, bytes]]) -> tuple[bytes, float] | None:
        """(tag, the kernel's send stamp) of a message sent with this run's key; None for anything else."""
        stamp = next((struct.unpack("qq", body[:16]) for level, kind, body in ancillary
                      if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS), None)
        if stamp is None or data[:KEY_BYTES] != self.key:
            return None
        return data[KEY_BYTES:], stamp[0] + stamp[1] / 1e9

    def _serve_cpu(self, conn: socket.socket) -> None:
        """Read a CPU-clock task's messages as they come, the worker's CPU clock read before each answer."""
        space = socket.CMSG_SPACE(16)
        pid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))[0]
        with conn:
            while True:
                try:
                    data, ancillary, _, _ = conn.recvmsg(64, space)
                except OSError:
                    return
                if not data:
                    return  # the worker closed its end
                read = self._stamped(data, ancillary)
                if read is None:
                    continue
                tag, cpu, caller = read[0], None, None
                if tag in SYNCED:  # the worker waits for the answer: its calling thread is idle while both are read
                    tag, cpu, caller = SYNCED[tag], process_cpu_s(pid), thread_cpu_s(pid, pid)
                    try:
                        conn.send(ANSWER)
                    except OSError:
                        return
                with self.lock:
                    self.stamps.append((tag, read[1], cpu, caller))
                    self.lock.notify_all()

    def _drain(self, conn: socket.socket) -> None:
        """Every message queued on ``conn``, stamped."""
        space = socket.CMSG_SPACE(16)
        while True:
            try:
                data, ancillary, _, _ = conn.recvmsg(64, space, socket.MSG_DONTWAIT)
            except OSError:  # nothing queued (BlockingIOError) or the connection gone
                return
            if not data:
                return
            read = self._stamped(data, ancillary)
            if read is not None:
                self.stamps.append((read[0], read[1], None, None))

    def clear(self) -> None:
        """Drop whatever is queued (a task that failed before its last message), without waiting for more."""
        with self.lock:
            for conn in list(self.connections):
                self._drain(conn)
            self.stamps = []

    def take(self) -> list[Stamp]:
        """The stamps queued since the last take. Wall-clock stamps are read only now, after the task answered
        (its worker sent them all before): a reader blocked on the socket during the calls would be woken by
        every message, and a woken reader can take the sender's core between its stamp and its clock read."""
        with self.lock:
            deadline = FLUSH_WAIT_S
            while True:
                for conn in list(self.connections):
                    self._drain(conn)
                if any(stamp[0] == FLUSH for stamp in self.stamps) or deadline <= 0:
                    break
                self.lock.wait(0.05)  # a worker's connection not accepted yet, or a CPU reader behind
                deadline -= 0.05
            out, self.stamps = self.stamps, []
        return out

    def close(self) -> None:
        for conn in self.connections:
            conn.close()
        self.sock.close()
        self.cpu_sock.close()
        shutil.rmtree(self.folder, ignore_errors=True)


def process_cpu_s(pid: int) -> float | None:
    """The CPU seconds process ``pid`` has used, from the kernel's per-process CPU clock (Linux's clock id for
    another process: ``(~pid << 3) | 2``, CPUCLOCK_SCHED), or None where the kernel refuses."""
    try:
        return time.clock_gettime((~pid << 3) | 2)
    except OSError:
        return None


def thread_cpu_s(pid: int, tid: int) -> float | None:
    """The CPU seconds thread ``tid`` of process ``pid`` has used (``/proc``'s schedstat, exact for a thread that
    is not running: the kernel refuses another process's per-thread clock), or None where it cannot be read."""
    try:
        with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as f:
            return int(f.read().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


_CLOCKS = {"wall": 1, "cpu": 2, "caller": 3}
"""Which part of a :data:`Stamp` a clock reads: the kernel's send stamp, the worker's CPU clock, its calling thread's."""


def _pairs(stamps: list[Stamp], clock: str) -> list[tuple[Stamp, Stamp]]:
    """Each call's (start, end) stamps with a reading on ``clock``, in order (an unpaired message is skipped)."""
    at = _CLOCKS[clock]
    out: list[tuple[Stamp, Stamp]] = []
    started: Stamp | None = None
    for stamp in stamps:
        if stamp[0] == START:
            started = stamp
        elif stamp[0] == END and started is not None and started[at] is not None and stamp[at] is not None:
            out.append((started, stamp))
            started = None
    return out


def spans(stamps: list[Stamp], clock: str = "wall") -> list[float]:
    """The span of each start/end pair on ``clock`` (wall: the kernel's send stamps; cpu: the worker's CPU clock
    read by the parent; caller: its calling thread's), in order."""
    at = _CLOCKS[clock]
    return [float(end[at]) - float(start[at]) for start, end in _pairs(stamps, clock)]  # type: ignore[arg-type]


def null_and_calls(stamps: list[Stamp], clock: str = "wall") -> tuple[float, list[float]]:
    """(the messages' own latency, the calls' spans with it taken off) from one task's stamps on ``clock``: a
    task that sent stamps begins with :data:`NULL_CALLS` null calls (:func:`connect`)."""
    all_spans = spans(stamps, clock)
    null = statistics.median(all_spans[:NULL_CALLS]) if len(all_spans) >= NULL_CALLS else 0.0
    return null, [max(0.0, s - null) for s in all_spans[NULL_CALLS:]]


# ---------------------------------------------------------------- worker side

_OPEN: dict[str, socket.socket] = {}


def flush(send: Callable[[bytes], None] | None) -> None:
    """Worker: the task's last stamp (the parent waits for it before reading the task's stamps)."""
    if send is not None:
        send(FLUSH)


def connect(ticket: tuple[str, bytes, str] | None) -> Callable[[bytes], None] | None:
    """Worker: the function that sends a stamp (None without a ticket), after :data:`NULL_CALLS` null calls that
    measure the sends' own cost, the same way as every call. On a "cpu" ticket a start or end waits for the
    parent's answer: the parent reads this process's CPU clock before it answers."""
    if ticket is None:
        return None
    address, key, clock = ticket
    sock = _OPEN.get(address)
    if sock is None:
        sock = _OPEN[address] = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)
        sock.connect(address)
    synced = {START: b"S", END: b"E"} if clock == "cpu" else {}
    messages = {tag: key + synced.get(tag, tag) for tag in (START, END, FLUSH)}
    raw, answer = sock.send, sock.recv

    def send(tag: bytes) -> None:
        raw(messages[tag])
        if tag in synced:
            answer(1)  # blocked, spending no CPU, while the parent reads this process's CPU clock

    for _ in range(NULL_CALLS):
        send(START)
        send(END)
    return send
