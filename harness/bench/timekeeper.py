"""A second clock on every timed call, kept by the parent: the worker's clock is not the only witness.

The timing worker runs plugin code, so anything in it (its clock, the timer its loop calls, the C
library's ``clock_gettime``) can be patched by a plugin. The parent stamps every timed call with
its own clock instead: the worker sends a one-byte message just before a call starts and one just
after it returns, over a Unix socket whose address and key the parent hands each task; a thread in
the parent reads them and stamps each on receipt with the clock this module bound when it was
imported. The span between a call's two stamps is the parent's measure of the call, the same for
every call; a null call (two messages with nothing between) measured the same way, the median of
:data:`NULL_CALLS`, is the messages' own latency and is taken off.

The parent holds its spans against the worker's samples (:mod:`harness.bench.verdicts`): a worker
whose samples add up to less than :data:`~harness.bench.verdicts.STAMP_SHARE` of what the parent
stamped had its clock slowed, whatever it did to it. Stamps are noisy (a thread has to wake up on a
busy machine), so the comparison is between medians and sums, not single calls.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Client, Connection, Listener
from typing import Any

_CLOCK = time.perf_counter
"""Bound when this module is imported, before any plugin is."""
START, END, FLUSH = b"s", b"e", b"f"
FLUSH_WAIT_S = 2.0
"""The longest the parent waits for a task's stamps to arrive after its answer did."""
NULL_CALLS = 15


class Timekeeper:
    """Parent side: a listening socket and a thread that stamps every message on receipt, per task."""

    def __init__(self) -> None:
        self.key = os.urandom(16)
        self.listener = Listener(family="AF_UNIX", authkey=self.key)
        self.address: str = str(self.listener.address)
        self.stamps: list[tuple[bytes, float]] = []
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
                conn = self.listener.accept()
            except (OSError, EOFError, ValueError):
                return
            except Exception:  # noqa: BLE001 - a wrong key: that connection is refused, the keeper goes on
                continue
            threading.Thread(target=self._read, args=(conn,), daemon=True).start()

    def _read(self, conn: Connection) -> None:
        try:
            while True:
                tag = conn.recv_bytes(16)
                stamp = _CLOCK()
                with self.lock:
                    self.stamps.append((tag, stamp))
                    if tag == FLUSH:
                        self.lock.notify_all()
        except (OSError, EOFError):
            conn.close()

    def take(self) -> list[tuple[bytes, float]]:
        """The stamps received since the last take, once the task's last message (:data:`FLUSH`) is in: its
        worker sent them all before it answered, but the reading thread may still be behind."""
        with self.lock:
            self.lock.wait_for(lambda: any(tag == FLUSH for tag, _ in self.stamps), timeout=FLUSH_WAIT_S)
            out, self.stamps = self.stamps, []
        return out

    def close(self) -> None:
        self.listener.close()


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

_OPEN: dict[str, Connection] = {}


def flush(send: Callable[[bytes], None] | None) -> None:
    """Worker: the task's last stamp (the parent waits for it before reading the task's stamps)."""
    if send is not None:
        send(FLUSH)


def connect(ticket: tuple[str, bytes] | None) -> Callable[[bytes], None] | None:
    """Worker: the function that sends a stamp to the parent (None without a ticket), after
    :data:`NULL_CALLS` null calls that measure the messages' own latency, the same way as every call."""
    if ticket is None:
        return None
    address, key = ticket
    conn = _OPEN.get(address)
    if conn is None:
        conn = _OPEN[address] = Client(address, family="AF_UNIX", authkey=key)
    send: Callable[[bytes], Any] = conn.send_bytes
    for _ in range(NULL_CALLS):
        send(START)
        send(END)
    return send
