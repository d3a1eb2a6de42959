"""What comes back from a call is what was computed: checks shared by verify and bench.

A result must be an exact ``torch.Tensor`` or ``numpy.ndarray`` (a subclass can compute when first
read, so a timer around the call would time nothing), strided and backed by real storage (not a
meta or lazy tensor), and must not share memory with an input (returning ``v`` itself when Tk = 1 is
numerically exact, but the caller's output would be the caller's input). No thread that was not
alive before the call may still be alive after it returns (a thread that fills the output after
the call returns would not be timed). Threads are read from ``/proc/self/task`` where it exists,
so native threads count too; elsewhere from :mod:`threading`.

Every check is cheap (no pass over the data) and says what it found in one sentence.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable
from typing import Any

import numpy as np
import torch

_sleep = time.sleep  # bound at import: plugin code may replace time.sleep later


def live_threads() -> frozenset[int]:
    """Ids of the threads of this process now: native thread ids on Linux, Python's elsewhere."""
    try:
        return frozenset(int(tid) for tid in os.listdir("/proc/self/task"))
    except OSError:
        return frozenset(t.ident or 0 for t in threading.enumerate())


def thread_cpu_s(tid: int) -> float | None:
    """Seconds of CPU thread ``tid`` of this process has run (Linux schedstat, nanoseconds); None when gone."""
    try:
        with open(f"/proc/self/task/{tid}/schedstat") as f:
            return int(f.read().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


def thread_problem(before: frozenset[int], wait_s: float = 0.002, sleep: Any = None) -> str | None:
    """A sentence when threads that were not there before the call are still working after it returned.

    A thread pool the call started and left idle (``ThreadPoolExecutor`` grows on demand) is fine: a new
    thread counts when it runs on a CPU for more than a fifth of ``wait_s`` after the call returned.
    Without /proc (not Linux) any new Python thread still alive counts.
    """
    new = live_threads() - before
    if not new:
        return None
    if not os.path.isdir("/proc/self/task"):
        busy = len(new)
    else:
        start = {tid: thread_cpu_s(tid) for tid in new}
        (sleep or _sleep)(wait_s)
        after = {tid: thread_cpu_s(tid) for tid in new}
        busy = 0
        for tid in new:
            before_s, after_s = start[tid], after[tid]
            if before_s is not None and after_s is not None and after_s - before_s > wait_s / 5:
                busy += 1
    if not busy:
        return None
    return (f"{busy} thread(s) started by the call were still working after it returned: work left running "
            "after a call is not timed (join worker threads before returning)")


def _storage_span(x: torch.Tensor) -> tuple[int, int] | None:
    storage = x.untyped_storage()
    return (storage.data_ptr(), storage.data_ptr() + storage.nbytes()) if storage.nbytes() else None


def _tensor_problem(x: Any, name: str, inputs: list[Any]) -> str | None:
    if type(x) is not torch.Tensor:
        kind = f"a subclass of torch.Tensor ({type(x).__module__}.{type(x).__qualname__})" \
            if isinstance(x, torch.Tensor) else type(x).__name__
        return f"{name} is {kind}, not an exact torch.Tensor: a wrapper or subclass may compute when it is read"
    if x.layout != torch.strided or x.is_meta or x.device.type == "meta":
        return f"{name} is not a materialised strided tensor (layout {x.layout}, device {x.device})"
    if x.numel() and x.untyped_storage().nbytes() == 0:
        return f"{name} has no storage behind it"
    span = _storage_span(x) if x.numel() else None
    for input_name, arr in inputs:
        if span is None or type(arr) is not torch.Tensor or arr.device != x.device or not arr.numel():
            continue
        other = _storage_span(arr)
        if other is not None and span[0] < other[1] and other[0] < span[1]:
            return f"{name} shares memory with the input {input_name}: return a new tensor, not a view of an input"
    return None


def _array_problem(x: Any, name: str, inputs: list[Any]) -> str | None:
    if type(x) is not np.ndarray:
        kind = f"a subclass of numpy.ndarray ({type(x).__qualname__})" if isinstance(x, np.ndarray) else type(x).__name__
        return f"{name} is {kind}, not an exact numpy.ndarray: a wrapper or subclass may compute when it is read"
    for input_name, arr in inputs:
        if isinstance(arr, np.ndarray) and x.size and arr.size and np.may_share_memory(x, arr):
            return f"{name} shares memory with the input {input_name}: return a new array, not a view of an input"
    return None


def result_problem(out: Any, inputs: Iterable[tuple[str, Any]], backend: str) -> str | None:
    """The first way ``out`` (an array, or a tuple of them for gradients) is not a computed result of
    its own, or None. ``inputs`` are (name, array) pairs of everything the call received."""
    named = [(n, x) for n, x in inputs if x is not None]
    parts = list(enumerate(out)) if isinstance(out, tuple) else [(None, out)]
    for i, part in parts:
        name = "the result" if i is None else f"result[{i}]"
        if part is None:  # an input with no gradient: the grad check reports it
            continue
        problem = _tensor_problem(part, name, named) if backend == "torch" else _array_problem(part, name, named)
        if problem:
            return problem
    return None
