"""The timed loop of a bench cell, built so that a plugin cannot fake its time.

Imported by the timing worker before any plugin is, so the clock, the CPU clock, ``sleep`` and
the random source below are the interpreter's own, bound before plugin code could replace them
(:func:`clock_problem` checks afterwards that nobody did).

- **Rotating inputs.** Calls cycle through several input sets (distinct storage, distinct values;
  :data:`DEFAULT_INPUT_SETS`), each prepared once, so no call sees the inputs of the call before
  it. For an implementation without its own set-up (``prepare=False``), q is also shifted in
  place before every call by a fresh random vector: its values never repeat, so a cache keyed on
  pointers, versions, shapes or content cannot return a right answer. An implementation with
  ``prepare=True`` may read q in its set-up, so its inputs are only rotated; the physics floor is
  what bounds it.
- **Kept samples.** The first timed call, one chosen at random (unpredictably, from the system's
  entropy) and one more after the loop, the last, are checked as they return: an exact,
  materialised array of its own (:mod:`harness.integrity`), copied at once for the output check,
  no new thread still working, and (random and last) the process's CPU time over
  :data:`CPU_WINDOW_S` after the return, against what the thread pools of torch and the BLAS burn
  spinning after a call of their own (:func:`spin_baseline`).
- **Accounting.** The worker reports how its time was spent, phase by phase, on the bound clock;
  the parent holds the sum against its own wall-clock time of the task.
"""

from __future__ import annotations

import random
import sys
import time
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from harness.bench.timing import TimingConfig, gc_disabled
from harness.integrity import live_threads, result_problem, thread_problem

CLOCK = time.perf_counter
CPU_CLOCK = time.process_time
SLEEP = time.sleep
ENTROPY = random.SystemRandom()
_BOUND = {name: getattr(time, name) for name in ("perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns",
                                                 "process_time", "thread_time", "time", "sleep")}

DEFAULT_INPUT_SETS = 3
"""Input sets a cell rotates through; 2 when three would exceed :data:`SETS_BYTES`, 1 with ``--warm-cache``."""
SETS_BYTES = 1 << 30
CPU_WINDOW_S = 0.015
"""Wall seconds after a checked call over which the process's CPU time is read."""
CPU_MARGIN = 0.5
"""Allowed CPU beyond the spin baseline, as a fraction of the window: half a core."""


@dataclass
class InputSet:
    """One set of inputs and the call prepared on it."""

    call: Callable[[], Any]
    named: list[tuple[str, Any]]
    """Everything the call received, by name: a result may share memory with none of it."""
    inputs: Any
    """The :class:`~harness.tensors.Inputs` (float64 copies for the reference)."""
    live_q: Any = None
    """The q the call reads, shifted in place before each call (None: not shifted)."""
    base_q: Any = None
    leaves: tuple[Any, Any, Any] | None = None
    """A backward's (q, k, v) leaves, whose gradients are the output."""
    grad_out: Any = None
    """A backward's upstream gradient."""
    prints: dict[str, bytes] | None = None
    """A digest of the whole buffer behind each input the call receives (q excepted when it is shifted), taken
    when the set was built: :func:`harness.bench.audit.input_problems` holds the buffers against it afterwards."""
    shifted_by: Any = None
    """The vector q was last shifted by: q must still be ``base_q + shifted_by`` after a checked call."""

    def shift(self, gen: Any) -> None:
        """New values for q: its pristine values plus a random row vector (O(Tq d), outside the timed call)."""
        if self.live_q is None:
            return
        import numpy as np
        import torch

        if isinstance(self.live_q, torch.Tensor):
            vec = 0.1 * torch.randn(self.live_q.shape[-1], generator=gen, dtype=torch.float32)
            threads = torch.get_num_threads()
            torch.set_num_threads(1)  # an OpenMP region stalls for milliseconds on a busy machine; one add need not
            try:
                with torch.no_grad():
                    self.shifted_by = vec.to(self.live_q.dtype).to(self.live_q.device)
                    torch.add(self.base_q, self.shifted_by, out=self.live_q)
            finally:
                torch.set_num_threads(threads)
        else:
            row = 0.1 * torch.randn(self.live_q.shape[-1], generator=gen, dtype=torch.float32).numpy()
            self.shifted_by = row.astype(self.live_q.dtype)
            np.add(self.base_q, self.shifted_by, out=self.live_q)

    def q_written(self) -> bool:
        """Whether the call wrote into the shifted q (it must still hold ``base_q + shifted_by``, bit for bit)."""
        if self.live_q is None or self.shifted_by is None:
            return False
        import numpy as np
        import torch

        if isinstance(self.live_q, torch.Tensor):
            with torch.no_grad():
                return not torch.equal(self.live_q, torch.add(self.base_q, self.shifted_by))
        return not np.array_equal(self.live_q, np.add(self.base_q, self.shifted_by))


@dataclass
class Kept:
    """A checked timed call: where it was, its output copied as it returned, what was wrong with it."""

    index: int
    set_index: int
    out: Any
    q: Any
    problem: str | None
    cpu_after_s: float | None = None
    dtypes: tuple[str, ...] = ()
    """The dtype of each array the call returned (the copy in ``out`` is float64)."""


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


def _exact(out: Any) -> bool:
    import numpy as np
    import torch

    parts = out if isinstance(out, tuple) else (out,)
    return all(p is None or type(p) is torch.Tensor or type(p) is np.ndarray for p in parts)


def _dtypes(out: Any) -> tuple[str, ...]:
    from harness.tensors import dtype_name

    parts = out if isinstance(out, tuple) else (out,)
    return tuple("none" if p is None else dtype_name(p) if hasattr(p, "dtype") else type(p).__name__ for p in parts)


def _copy(out: Any) -> Any:
    from harness.tensors import to_float64

    if isinstance(out, tuple):
        return tuple(None if p is None else to_float64(p) for p in out)
    return to_float64(out)


def _capture(index: int, sets: list[InputSet], out: Any, threads: frozenset[int], backend: str,
             cpu: bool) -> Kept:
    s = sets[index % len(sets)]
    problem = result_problem(out, s.named, backend)
    try:
        copy = _copy(out)  # what the call returned, as it is now
    except Exception as exc:  # noqa: BLE001 - an output that cannot be read is the finding
        copy, problem = None, problem or f"the result could not be read: {type(exc).__name__}: {exc}"
    if cpu:  # on CUDA a host thread's work after the return says nothing of the device's: docs/integrity.md
        problem = problem or thread_problem(threads, sleep=SLEEP)
    if problem is None and s.q_written():
        problem = "the call wrote into its input q: a call may read its inputs, never write them"
    q = None if s.live_q is None else _copy(s.live_q)
    kept = Kept(index, index % len(sets), copy, q, problem, dtypes=_dtypes(out))
    if cpu:
        kept.cpu_after_s = cpu_burnt()
    return kept


def timed_loop(sets: list[InputSet], config: TimingConfig, backend: str,
               profile: Callable[[Callable[[], Any]], Any] | None = None, sample_clock: Callable[[], float] | None = None) -> Loop:
    """Time calls rotating through ``sets``; samples, kept (checked) calls and the accounting.
    ``profile`` runs the first warm-up call (untimed anyway), so disclosure costs no extra call.
    ``sample_clock`` times each call (default :data:`CLOCK`, wall time; ``attnbench ab --clock cpu`` gives
    :data:`CPU_CLOCK`, the process's CPU time, which other processes' load does not stretch)."""
    loop = RoundedLoop(sets, config, backend, rounds=1, sample_clock=sample_clock)
    loop.round(profile)
    return loop.result()


class RoundedLoop:
    """:func:`timed_loop` cut into ``rounds``, so the parent can interleave contenders between them
    (:mod:`harness.bench.rounds`). The state (input sets, the random draws, the samples and the kept
    calls) lives here between rounds. Round 0 warms up for ``warmup_s``; a later round re-warms for
    at most ``warmup_s / rounds`` (no call when one call would take longer: the caches another
    contender evicted are refilled, a slow call is not repeated). Each round takes ``budget_s /
    rounds`` of timed calls and at least one call and its share of the ``min_samples`` still to take; the first timed call, one
    drawn at random and the last call of the last round are checked as in :func:`timed_loop`."""

    def __init__(self, sets: list[InputSet], config: TimingConfig, backend: str, rounds: int = 1,
                 sample_clock: Callable[[], float] | None = None) -> None:
        import torch

        self.sets, self.config, self.backend, self.rounds = sets, config, backend, max(1, rounds)
        self.timer = CLOCK if sample_clock is None else sample_clock
        self.gen = torch.Generator().manual_seed(ENTROPY.getrandbits(63))
        self.samples: list[float] = []
        self.kept: list[Kept] = []
        self.untyped: list[int] = []
        self.round_sizes: list[int] = []
        self.warm_s = self.loop_s = self.captured = 0.0
        self.expected = self.pick = 0
        self.profiled: Any = None
        self.per_call_s = 0.0

    @property
    def done(self) -> bool:
        return len(self.round_sizes) >= self.rounds

    def _warm(self, profile: Callable[[Callable[[], Any]], Any] | None) -> None:
        sets, n = self.sets, len(self.sets)
        first = not self.round_sizes
        limit = self.config.warmup_s if first else self.config.warmup_s / self.rounds
        started = CLOCK()
        calls = 0
        while (first and calls < 1) or (CLOCK() - started < limit and CLOCK() - started + self.per_call_s <= limit):
            sets[calls % n].shift(self.gen)
            if first and calls == 0 and profile is not None:
                self.profiled = profile(sets[0].call)
            else:
                out = sets[calls % n].call()
                del out
            calls += 1
        spent = CLOCK() - started
        self.warm_s += spent
        if first:
            self.per_call_s = spent / calls
            config = self.config
            self.expected = max(config.min_samples, min(config.max_samples, int(config.budget_s / max(self.per_call_s, 1e-9))))
            self.pick = ENTROPY.randrange(1, max(2, self.expected))

    def round(self, profile: Callable[[Callable[[], Any]], Any] | None = None, rounds: int | None = None) -> list[float]:
        """Run the next round; its samples. ``rounds`` resets the number of rounds (never below those run and
        this one): the parent decides it after the first, from the contenders' call times."""
        if rounds is not None:
            self.rounds = max(rounds, len(self.round_sizes) + 1)
        if self.done:
            raise RuntimeError("every round of this loop has run")
        config, sets, n = self.config, self.sets, len(self.sets)
        final = len(self.round_sizes) == self.rounds - 1
        left = self.rounds - len(self.round_sizes)  # the round count may grow after the first round
        least = max(1, -(-max(0, config.min_samples - len(self.samples)) // left))  # min_samples in all, a call a round
        most = max(least, -(-max(0, config.max_samples - len(self.samples)) // left))
        budget = config.budget_s / self.rounds
        # the last round's last call is checked, so it is named before it runs: where the calls of earlier rounds say
        # the next would spend the round's budget, it is the last (a slow cell makes no extra call past its budget)
        ahead = sum(self.samples) / len(self.samples) if self.samples else 0.0
        with gc_disabled():
            self._warm(profile)
            first = len(self.samples)
            spent = 0.0
            loop_started = self.timer()  # the loop's and the captures' time on the samples' clock, so the
            last = False  # samples, the captures and the gap between them add up on one clock
            while True:
                i = len(self.samples)
                k = i - first
                more = k < least - 1 or (k < most - 1 and spent + ahead < budget) if final else \
                    k < least or (k < most and spent < budget)
                if not more:
                    if not final:
                        break
                    last = True  # one more call, the last, checked
                s = sets[i % n]
                s.shift(self.gen)
                check = i == 0 or i == self.pick or last
                threads = live_threads() if check else frozenset()
                t0 = self.timer()
                out = s.call()
                t1 = self.timer()
                self.samples.append(t1 - t0)
                spent += t1 - t0
                if check:
                    c0 = self.timer()
                    self.kept.append(_capture(i, sets, out, threads, self.backend, cpu=i == self.pick or last))
                    self.captured += self.timer() - c0
                elif not _exact(out):
                    self.untyped.append(i)
                del out
                if last:
                    break
            self.loop_s += self.timer() - loop_started
        self.round_sizes.append(len(self.samples) - first)
        return self.samples[first:]

    def result(self) -> Loop:
        return Loop(samples=self.samples, kept=self.kept, untyped=self.untyped, warmup_s=self.warm_s,
                    loop_s=self.loop_s, captures_s=self.captured, expected=self.expected, pick=self.pick,
                    profile=self.profiled, round_sizes=tuple(self.round_sizes))


@dataclass(frozen=True)
class Loop:
    """What :func:`timed_loop` measured: the samples, the kept (checked) calls and its own clock's accounting."""

    samples: list[float]
    kept: list[Kept]
    untyped: list[int]
    """Samples whose call returned something other than an exact array."""
    warmup_s: float
    loop_s: float
    captures_s: float
    expected: int = 0
    pick: int = 0
    """The sample checked besides the first and the last, drawn so a plugin cannot predict it."""
    profile: Any = None
    round_sizes: tuple[int, ...] = ()
    """Samples per round, in order (one round: the plain loop)."""


def cuda_loop(sets: list[InputSet], config: TimingConfig, backend: str) -> Loop:
    """Time calls on CUDA rotating through ``sets`` (:func:`harness.bench.timing.cuda_timed`: CUDA events, L2
    flushed): q is shifted before each timed call, outside its event bracket, and the last timed call is kept
    and checked after the loop (an exact array of its own, no thread left working; its output copied to the host
    for the float64 check). Not on CUDA: the first and a random call are not kept (copying a device output
    mid-loop would synchronise and time the copy) and no CPU time is read after a call (the host returns
    before the device is done, so it says nothing); docs/integrity.md lists what a CUDA cell is checked for."""
    import torch

    from harness.bench.timing import cuda_timed

    gen = torch.Generator().manual_seed(ENTROPY.getrandbits(63))
    n = len(sets)
    state: dict[str, Any] = {"calls": 0, "timed": None, "last": None, "threads": frozenset()}
    untyped: list[int] = []

    def before(i: int) -> None:
        sets[state["calls"] % n].shift(gen)
        state["timed"], state["threads"] = i, live_threads()

    def call() -> Any:
        k = state["calls"]
        out = sets[k % n].call()
        state["calls"] = k + 1
        if state["timed"] is not None and not _exact(out):
            untyped.append(state["timed"])
        state["last"] = (k, out)  # held until the next call returns: the last timed call's output survives
        return out

    times = cuda_timed(call, config, before)
    index, out = state["last"]
    state["last"] = None
    torch.cuda.synchronize()
    kept = _capture(index, sets, out, state["threads"], backend, cpu=False)
    kept.index = len(times.samples) - 1  # the sample's number; its set is the call's
    return Loop(samples=times.samples, kept=[kept], untyped=untyped, warmup_s=times.warmup_s, loop_s=times.loop_s,
                captures_s=0.0, expected=len(times.samples), pick=kept.index)
