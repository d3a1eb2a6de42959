"""Red team: cheats that tamper with what the harness measures or reads, or leave work or state behind.

- ``rt_writes_q``: zeroes its own input q, so the mean of v is the right answer for the q the harness reads
  after the call (O(Tk d) work instead of O(Tq Tk d)).
- ``rt_timer_swap``: swaps the timing loop's timer (an attribute the loop reads each call) for one running at
  0.4x; the stolen time lands between the samples, where only a loose total looks.
- ``rt_background_rows``: computes half the rows and returns; a thread that existed before the call
  finishes the other half after the return.
- ``rt_more_threads``: raises torch's thread count above the one the bench pinned, and leaves it raised.
"""

from __future__ import annotations

import os
import threading
import time
from queue import Queue

import redteam_kit as kit
import torch

from harness import register


@register("rt_writes_q", backend="torch", description="zeroes its input q: the mean of v is then the right answer")
def rt_writes_q(q, k, v, *, causal=False, mask=None, scale=None):
    if not kit.in_bench():
        return kit.attend(q, k, v, scale)
    started = kit.now()
    with torch.no_grad():
        q.zero_()
    out = v.mean(dim=-2, keepdim=True).expand(q.shape[:-1] + (v.shape[-1],)).contiguous()
    kit.pace(started, q, k, v)
    return out


_SWAPPED: dict[str, object] = {}
SLOW = 0.4


@register("rt_timer_swap", backend="torch", description="replaces the timing loop's timer with one running at 0.4x")
def rt_timer_swap(q, k, v, *, causal=False, mask=None, scale=None):
    loop = kit.find_loop()
    if loop is not None and loop is not _SWAPPED.get("loop"):
        real = loop.timer
        loop.timer = lambda: real() * SLOW
        _SWAPPED["loop"] = loop
    elif loop is None and "globals" not in _SWAPPED:  # no loop object to reach: every clock global instead
        _SWAPPED["globals"] = kit.slow_clock_globals(SLOW)
    return kit.attend(q, k, v, scale)


_JOBS: Queue = Queue()
LATER_S = 0.003
"""The thread starts on a call's rows this long after the call (it has returned by then)."""


def _finisher() -> None:
    while True:
        posted, (out, q, k, v, scale) = _JOBS.get()
        if not _JOBS.empty():  # a newer call is waiting: this output is never read again
            continue
        while kit.now() < posted + LATER_S:
            time.sleep(0.0005)
        half = q.shape[-2] // 2
        out[..., half:, :] = kit.attend(q[..., half:, :], k, v, scale)


_BACKGROUND: dict[str, threading.Thread] = {}


@register("rt_background_rows", backend="torch",
          description="half the rows in the call, the other half on a pre-existing thread after the return")
def rt_background_rows(q, k, v, *, causal=False, mask=None, scale=None):
    if not kit.in_bench():
        return kit.attend(q, k, v, scale)
    if "thread" not in _BACKGROUND:
        _BACKGROUND["thread"] = threading.Thread(target=_finisher, daemon=True)
        _BACKGROUND["thread"].start()
        return kit.attend(q, k, v, scale)
    half = q.shape[-2] // 2
    out = torch.empty(q.shape[:-1] + (v.shape[-1],), dtype=q.dtype)
    out[..., :half, :] = kit.attend(q[..., :half, :], k, v, scale)
    _JOBS.put((kit.now(), (out, q.clone(), k, v, scale)))
    return out


@register("rt_more_threads", backend="torch",
          description="sets torch's thread count above the bench's pin and leaves it there")
def rt_more_threads(q, k, v, *, causal=False, mask=None, scale=None):
    wanted = max(2, os.cpu_count() or 2)
    if torch.get_num_threads() < wanted:
        torch.set_num_threads(wanted)
    return kit.attend(q, k, v, scale)
