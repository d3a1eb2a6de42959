"""A second clock on every timed call, kept outside the worker: the worker's clock is not the only witness.

The timing worker runs plugin code, so anything in it (its clock, the timer its loop calls, the C
library's ``clock_gettime``) can be patched by a plugin. So every timed call is also stamped by the
kernel: the worker sends a message just before a call starts and one just after it returns, over a
Unix ``SOCK_SEQPACKET`` connection to a socket the parent (which runs no plugin code) listens on, with
``SO_TIMESTAMPNS`` set, and the kernel stamps each message as it is sent. The parent reads them only
after the task has answered, so no reader is woken mid-loop, and the stamp is the kernel's clock at
the send however late it is read. (A datagram socket would stamp the same, but its queue holds 10 messages, so a sender
would wait for a late reader and its stamps with it; a connection queues what its send buffer holds,
:data:`SEND_BUFFER`: thousands of calls.) Each message carries the run's random key (the socket is in a directory only
this user can enter). The span
between a call's two stamps is the kernel's measure of the call, the same for every call; a null call
(two datagrams with nothing between), the median of :data:`NULL_CALLS`, is the sends' own cost and is
taken off.

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
from collections.abc import Callable

START, END, FLUSH = b"s", b"e", b"f"
NULL_CALLS = 15
FLUSH_WAIT_S = 5.0
"""The longest the parent waits for a task's stamps to arrive after its answer did."""
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
"""Linux's option number where Python does not name it."""
KEY_BYTES = 16
SEND_BUFFER = 1 << 22
"""Bytes of messages a worker may queue while the parent's reading thread waits for a core (thousands of calls)."""


class Timekeeper:
    """Parent side: a listening socket whose connections the kernel stamps every message on; threads drain them."""

    def __init__(self) -> None:
        self.key = os.urandom(KEY_BYTES)
        self.folder = tempfile.mkdtemp(prefix="attnbench-t")
        os.chmod(self.folder, 0o700)
        self.address = os.path.join(self.folder, "stamps")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock.bind(self.address)
        self.sock.listen(8)
        self.stamps: list[tuple[bytes, float]] = []
        self.connections: list[socket.socket] = []
        self.lock = threading.Condition()
        self.thread = threading.Thread(target=self._accept, daemon=True, name="attnbench-timekeeper")
        self.thread.start()

    @property
    def ticket(self) -> tuple[str, bytes]:
        """What a task needs to send its stamps here (picklable)."""
        return self.address, self.key

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            conn.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            with self.lock:
                self.connections.append(conn)
                self.lock.notify_all()

    def _drain(self, conn: socket.socket) -> bool:
        """Every message queued on ``conn``, stamped; whether the task's last one (:data:`FLUSH`) was among them."""
        space = socket.CMSG_SPACE(16)
        flushed = False
        while True:
            try:
                data, ancillary, _, _ = conn.recvmsg(64, space, socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                return flushed
            except OSError:
                return flushed
            if not data:
                return flushed
            stamp = next((struct.unpack("qq", body[:16]) for level, kind, body in ancillary
                          if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS), None)
            if stamp is None or data[:KEY_BYTES] != self.key:
                continue  # not sent with this run's key: not a stamp
            self.stamps.append((data[KEY_BYTES:], stamp[0] + stamp[1] / 1e9))
            flushed = flushed or data[KEY_BYTES:] == FLUSH

    def take(self, wait: bool = True) -> list[tuple[bytes, float]]:
        """The stamps queued since the last take. Read only now, after the task answered (its worker sent them
        all before): a reader blocked on the socket during the calls would be woken by every message, and a
        woken reader can take the sender's core between its stamp and its clock read. ``wait``: for the task's
        last message, up to :data:`FLUSH_WAIT_S` (False: what is there now, to clear leftovers)."""
        with self.lock:
            deadline = FLUSH_WAIT_S if wait else 0.0
            flushed = False
            while True:
                for conn in list(self.connections):
                    flushed = self._drain(conn) or flushed
                if flushed or deadline <= 0:
                    break
                self.lock.wait(0.05)  # a worker's connection not accepted yet
                deadline -= 0.05
            out, self.stamps = self.stamps, []
        return out

    def close(self) -> None:
        for conn in self.connections:
            conn.close()
        self.sock.close()
        shutil.rmtree(self.folder, ignore_errors=True)


def spans(stamps: list[tuple[bytes, float]]) -> list[float]:
    """The span of each start/end pair, in order (an unpaired message is skipped)."""
    out, started = [], None
    for tag, stamp in stamps:
        if tag == START:
            started = stamp
        elif tag == END and started is not None:
            out.append(stamp - started)
            started = None
    return out


def null_and_calls(stamps: list[tuple[bytes, float]]) -> tuple[float, list[float]]:
    """(the messages' own latency, the calls' spans with it taken off) from one task's stamps: a task that
    sent stamps begins with :data:`NULL_CALLS` null calls (:func:`connect`)."""
    all_spans = spans(stamps)
    null = statistics.median(all_spans[:NULL_CALLS]) if len(all_spans) >= NULL_CALLS else 0.0
    return null, [max(0.0, s - null) for s in all_spans[NULL_CALLS:]]


# ---------------------------------------------------------------- worker side

_OPEN: dict[str, socket.socket] = {}


def flush(send: Callable[[bytes], None] | None) -> None:
    """Worker: the task's last stamp (the parent waits for it before reading the task's stamps)."""
    if send is not None:
        send(FLUSH)


def connect(ticket: tuple[str, bytes] | None) -> Callable[[bytes], None] | None:
    """Worker: the function that sends a stamp (None without a ticket), after :data:`NULL_CALLS` null calls that
    measure the sends' own cost, the same way as every call."""
    if ticket is None:
        return None
    address, key = ticket
    sock = _OPEN.get(address)
    if sock is None:
        sock = _OPEN[address] = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)
        sock.connect(address)
    messages = {tag: key + tag for tag in (START, END, FLUSH)}
    raw = sock.send

    def send(tag: bytes) -> None:
        raw(messages[tag])

    for _ in range(NULL_CALLS):
        send(START)
        send(END)
    return send
