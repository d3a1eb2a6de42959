"""What a timed call is checked for, on clocks bound before any plugin could replace them.

Imported by the timing worker before any plugin is, so the clock, the CPU clock, ``sleep`` and the
random source below are the interpreter's own, bound before plugin code could replace them
(:func:`clock_problem` and :mod:`harness.bench.state` check afterwards that nobody did). The loop that
times the calls is :mod:`harness.bench.loop`; this module is what it stands on, kept apart so the bound
clocks and the checks of one call read on their own:

- **Fresh inputs** (:mod:`harness.bench.fresh`). Calls cycle through input sets (:class:`InputSet`, distinct
  storage; :data:`DEFAULT_INPUT_SETS`), and q, k and v are rewritten before every call with fresh full-rank
  noise from a seed drawn from the system's entropy just then (:func:`harness.bench.audit.fresh_each_call`:
  implementations with their own set-up too; a backward alone is only rotated, the physics floor bounds it).
- **After the return** (:func:`after_call`), in this order: the result's exact type; the interpreter's state
  (:class:`~harness.bench.state.StateGuard`: no mode pushed, no function of the harness replaced, ...);
  the result is an array of its own; its fingerprint (:mod:`harness.bench.fingerprint`); no input
  written; no new thread still working.
- **Work after the call** (:func:`cpu_burnt` against :func:`spin_baseline`): CPU burnt once the last call
  returned, beyond what the thread pools' spinning burns.
"""

from __future__ import annotations

import random
import sys
import time
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from harness.bench import fingerprint as fp
from harness.bench import (
    state,
    timing,  # noqa: F401 - imported before any plugin, so its functions are watched
)
from harness.bench.fingerprint import Print
from harness.bench.fresh import Fresh
from harness.bench.verdicts import CPU_WINDOW_S
from harness.reference.integrity import result_problem, thread_problem

CLOCK = time.perf_counter
CPU_CLOCK = time.process_time
SLEEP = time.sleep
ENTROPY = random.SystemRandom()
_BOUND = {name: getattr(time, name) for name in ("perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns",
                                                 "process_time", "thread_time", "time", "sleep")}

DEFAULT_INPUT_SETS = 3
"""Input sets a cell rotates through; 2 when three would exceed :data:`SETS_BYTES`, 1 with ``--warm-cache``."""
SETS_BYTES = 1 << 30


@dataclass
class InputSet:
    """One set of inputs and the call prepared on it."""

    call: Callable[[], Any]
    named: list[tuple[str, Any]]
    """Everything the call received, by name: a result may share memory with none of it."""
    inputs: Any
    """The :class:`~harness.reference.tensors.Inputs` (float64 copies for the reference)."""
    fresh: Fresh | None = None
    """The arrays redrawn before every call (None: the set's inputs as prepared)."""
    leaves: tuple[Any, Any, Any] | None = None
    """A backward's (q, k, v) leaves, whose gradients are the output."""
    grad_out: Any = None
    """A backward's upstream gradient."""
    redrawn: tuple[Any, ...] = ()
    """The arrays the parent redraws in shared memory before every call (:mod:`harness.bench.driven`)."""
    prints: dict[str, bytes] | None = None
    """A digest of the whole buffer behind each input the call receives (those redrawn excepted), taken when
    the set was built: :func:`harness.bench.audit.input_problems` holds the buffers against it afterwards."""

    def lay_out(self) -> int | None:
        """Fresh inputs for the next call; their seed (None: nothing is redrawn)."""
        if self.fresh is None:
            return None
        seed = ENTROPY.getrandbits(63)
        self.fresh.lay_out(seed)
        return seed


def clock_problem() -> str | None:
    """A sentence when a time function was replaced since this module was imported, or ours was."""
    changed = [f"time.{name}" for name, fn in _BOUND.items() if getattr(time, name) is not fn]
    ours = CLOCK is _BOUND["perf_counter"] and type(CLOCK) is types.BuiltinFunctionType \
        and getattr(CLOCK, "__self__", None) is sys.modules.get("time")
    if not ours:
        changed.append("the harness's own bound clock")
    return f"{', '.join(changed)} replaced in the timing worker: the clock must not be patched" if changed else None


def cpu_burnt(window_s: float = CPU_WINDOW_S) -> float:
    """Process CPU seconds over ``window_s`` wall seconds of this thread sleeping."""
    c0 = CPU_CLOCK()
    SLEEP(window_s)
    return CPU_CLOCK() - c0


_SPIN: list[float] = []


def spin_baseline() -> float:
    """CPU seconds torch's and the BLAS's idle threads burn over the window after a call of their own
    (they spin a while before sleeping): the most of three readings of each, measured once per worker."""
    if not _SPIN:
        import numpy as np
        import torch

        a = torch.ones(384, 384)
        b = np.ones((384, 384), dtype=np.float32)
        readings = []
        for fn in (lambda: a @ a, lambda: b @ b) * 3:
            fn()
            readings.append(cpu_burnt())
        _SPIN.append(max(readings))
    return _SPIN[0]


def exact_arrays(out: Any) -> bool:
    """Every part of ``out`` is an exact torch.Tensor or numpy.ndarray (None aside): no subclass whose code could run."""
    import numpy as np
    import torch

    return all(p is None or type(p) is torch.Tensor or type(p) is np.ndarray for p in fp.parts(out))


def after_call(index: int, s: InputSet, seed: int | None, out: Any, threads: frozenset[int] | None, backend: str,
               guard: state.StateGuard) -> Print:
    """What a timed call left, read the moment it returned, in an order no output can exploit: its type (no
    code of a subclass runs), the interpreter's state, its storage, its fingerprint, the inputs, the threads."""
    exact = exact_arrays(out)
    problem = guard.problem()
    if not exact:  # nothing of a wrapper is read: reading it would run its code
        return Print(index, -1, seed, (), (), (), problem or "returned something that is not an exact "
                     "torch.Tensor / numpy.ndarray", untyped=True)
    problem = problem or result_problem(out, s.named, backend)
    try:
        vectors, prints = fp.fingerprint(out, ENTROPY.getrandbits(63))
    except Exception as exc:  # noqa: BLE001 - an output that cannot be read is the finding
        vectors, prints = (), ()
        problem = problem or f"the result could not be read: {type(exc).__name__}: {exc}"
    written = s.fresh.written() if s.fresh is not None else []
    if written and problem is None:
        problem = f"the call wrote into its input(s) {', '.join(written)}: a call may read its inputs, never write them"
    if threads is not None and problem is None:  # on CUDA a host thread says nothing of the device: docs/integrity.md
        problem = thread_problem(threads, sleep=SLEEP)
    return Print(index, -1, seed, vectors, prints, fp.dtypes(out), problem)


def _watch() -> None:
    """No function or class the timed loop calls may be replaced by a call (:mod:`harness.bench.state`; the
    loop's own module watches itself)."""
    for name in (__name__, "harness.bench.fingerprint", "harness.bench.state", "harness.bench.fresh", "harness.reference.integrity",
                 "harness.bench.timing"):
        state.watch_module(sys.modules[name])


_watch()
