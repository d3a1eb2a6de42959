"""The timed loop of a bench cell, built so that a plugin that has read this file cannot fake its time.

Every timed call gets the same treatment, so nothing a plugin can observe tells one call from another: its
inputs laid out fresh before it and the checks of :func:`harness.bench.guard.after_call` read the moment it
returns, on the clocks :mod:`harness.bench.guard` bound before any plugin was imported (this module is imported
with it, by every worker task that times calls, before the plugin's source is).

- **Checks chosen after the fact.** When the loop has ended, the calls to check against float64 are drawn
  (:func:`~harness.bench.fingerprint.choose`); :mod:`harness.bench.audit` checks them on their own inputs.
- **Accounting.** The worker reports how its time was spent, phase by phase, on the bound clock;
  the parent holds the sum against its own wall-clock time of the task.
- **Rounds.** :class:`RoundedLoop` keeps a cell's state between the rounds the parent interleaves with other
  contenders (:mod:`harness.bench.rounds`); :func:`timed_loop` is one round of it. A CUDA cell has a loop of
  its own (:func:`cuda_loop`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from harness.bench import fingerprint as fp
from harness.bench import state
from harness.bench.fingerprint import Print
from harness.bench.guard import CLOCK, ENTROPY, InputSet, after_call, cpu_burnt, exact_arrays
from harness.bench.timing import TimingConfig, gc_disabled
from harness.reference.integrity import live_threads


def timed_loop(sets: list[InputSet], config: TimingConfig, backend: str,
               profile: Callable[[Callable[[], Any]], Any] | None = None, sample_clock: Callable[[], float] | None = None
               ) -> Loop:
    """Time calls rotating through ``sets``; samples, the calls to check and the accounting.
    ``profile`` runs the first warm-up call (untimed anyway), so disclosure costs no extra call.
    ``sample_clock`` times each call (default :data:`CLOCK`, wall time; ``attnbench ab --clock cpu`` gives
    :data:`CPU_CLOCK`, the process's CPU time, which other processes' load does not stretch)."""
    loop = RoundedLoop(sets, config, backend, rounds=1, sample_clock=sample_clock)
    loop.round(profile)
    return loop.result()


class RoundedLoop:
    """:func:`timed_loop` cut into ``rounds``, so the parent can interleave contenders between them
    (:mod:`harness.bench.rounds`). The state (input sets, the samples and every call's fingerprint) lives
    here between rounds. Round 0 warms up for ``warmup_s``; a later round re-warms for ``warmup_s / rounds``, one
    call at least (what the contenders between rounds left behind is paid by an untimed call). Each round takes
    ``budget_s / rounds`` of timed calls with their per-call checks (so the checks make a run no longer: a small
    call gets fewer samples) and at least one call and its share of the ``min_samples`` still to take. Every call
    is fingerprinted; which are checked is drawn in :meth:`result`, after the last call."""

    def __init__(self, sets: list[InputSet], config: TimingConfig, backend: str, rounds: int = 1,
                 sample_clock: Callable[[], float] | None = None) -> None:
        self.sets, self.config, self.backend, self.rounds = sets, config, backend, max(1, rounds)
        self.timer = CLOCK if sample_clock is None else sample_clock
        self.samples: list[float] = []
        self.prints: list[Print] = []
        self.untyped: list[int] = []
        self.round_sizes: list[int] = []
        self.warm_s = self.loop_s = self.captured = 0.0
        self.expected = 0
        self.profiled: Any = None
        self.per_call_s = 0.0
        self.warm_written: str | None = None
        """What a warm-up call wrote into its inputs (the first such call), said as the loop's violation."""
        self.state = state.StateGuard((("the timing loop's timer", self, "timer"), ("the timing loop's sets", self, "sets"),
                                       ("the timing loop's samples", self, "samples")))

    @property
    def done(self) -> bool:
        return len(self.round_sizes) >= self.rounds

    def _warm(self, profile: Callable[[Callable[[], Any]], Any] | None) -> None:
        sets, n = self.sets, len(self.sets)
        first = not self.round_sizes
        limit = self.config.warmup_s if first else self.config.warmup_s / self.rounds
        started = CLOCK()
        calls = 0
        while calls < 1 or (CLOCK() - started < limit and CLOCK() - started + self.per_call_s <= limit):
            sets[calls % n].lay_out()
            if first and calls == 0 and profile is not None:
                self.profiled = profile(sets[0].call)
            else:
                out = sets[calls % n].call()
                del out
            fresh = sets[calls % n].fresh
            written = fresh.written() if fresh is not None else []
            if written and self.warm_written is None:  # untimed, yet a call may never write its inputs
                self.warm_written = f"a warm-up call wrote into its input(s) {', '.join(written)}: a call may read " \
                    "its inputs, never write them"
            calls += 1
        spent = CLOCK() - started
        self.warm_s += spent
        if first:
            self.per_call_s = spent / calls
            config = self.config
            self.expected = max(config.min_samples, min(config.max_samples, int(config.budget_s / max(self.per_call_s, 1e-9))))

    def round(self, profile: Callable[[Callable[[], Any]], Any] | None = None, rounds: int | None = None) -> list[float]:
        """Run the next round; its samples. ``rounds`` resets the number of rounds (never below those run and
        this one)."""
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
        with gc_disabled():
            self._warm(profile)
            first = len(self.samples)
            spent = 0.0
            loop_started = self.timer()  # the loop, its checks and its samples on one clock
            while True:
                i = len(self.samples)
                k = i - first
                if not (k < least or (k < most and spent < budget)):
                    break
                s = sets[i % n]
                c0 = self.timer()  # on the samples' clock, as the loop and the captures it is added to
                seed = s.lay_out()
                threads = live_threads()
                laid_out = self.timer() - c0
                self.captured += laid_out  # the harness's own work between calls, not the call's
                t0 = self.timer()
                out = s.call()
                t1 = self.timer()
                self.samples.append(t1 - t0)
                spent += t1 - t0
                c0 = self.timer()
                record = after_call(i, s, seed, out, threads, self.backend, self.state)
                del out
                record.set_index = i % n
                if record.untyped:
                    self.untyped.append(i)
                self.prints.append(record)
                checked = self.timer()
                self.captured += checked - c0
                spent += checked - c0 + laid_out  # the budget buys calls with their checks: a run takes no longer
            if final and self.prints:  # a registration persists: read once, after the last call
                c0 = self.timer()
                overridden = self.state.kernel_problem()
                if overridden is not None and self.prints[-1].problem is None:
                    self.prints[-1].problem = overridden
                self.captured += self.timer() - c0
            if final and self.prints:
                c0 = self.timer()
                self.prints[-1].cpu_after_s = cpu_burnt()  # work still running after the last call
                self.captured += self.timer() - c0
            self.loop_s += self.timer() - loop_started
        self.round_sizes.append(len(self.samples) - first)
        return self.samples[first:]

    def result(self) -> Loop:
        """What the loop measured, and the calls to check: drawn now, after the last call returned."""
        chosen = fp.choose(len(self.prints), ENTROPY) if self.done else []
        kept = [self.prints[i] for i in chosen]
        seen = {p.problem for p in kept}
        for p in self.prints:  # each distinct problem once, with the first call that had it
            if p.problem and p.problem not in seen:
                seen.add(p.problem)
                kept.append(p)
        if self.warm_written is not None and self.prints and self.warm_written not in seen:
            if self.prints[0] not in kept:
                kept.append(self.prints[0])
            if self.prints[0].problem is None:
                self.prints[0].problem = self.warm_written
        kept.sort(key=lambda p: p.index)
        return Loop(samples=self.samples, kept=kept, untyped=self.untyped, warmup_s=self.warm_s,
                    loop_s=self.loop_s, captures_s=self.captured, expected=self.expected,
                    profile=self.profiled, round_sizes=tuple(self.round_sizes))


@dataclass(frozen=True)
class Loop:
    """What :func:`timed_loop` measured: the samples, the calls to check and its own clock's accounting."""

    samples: list[float]
    kept: list[Print]
    """The calls drawn for the float64 check after the loop, and the first call with each problem found."""
    untyped: list[int]
    """Samples whose call returned something other than an exact array."""
    warmup_s: float
    loop_s: float
    captures_s: float
    expected: int = 0
    profile: Any = None
    round_sizes: tuple[int, ...] = ()
    """Samples per round, in order (one round: the plain loop)."""


def cuda_loop(sets: list[InputSet], config: TimingConfig, backend: str) -> Loop:
    """Time calls on CUDA rotating through ``sets`` (:func:`harness.bench.timing.cuda_timed`: CUDA events, L2
    flushed): fresh inputs are laid out before each timed call, outside its event bracket, and every call's
    state and type are read after it returns; the last timed call is fingerprinted after the loop (reading a
    device output mid-loop would synchronise and time the read) and checked. docs/integrity.md lists what a
    CUDA cell is checked for."""
    import torch

    from harness.bench.timing import cuda_timed

    n = len(sets)
    guard = state.StateGuard()
    calls: dict[str, Any] = {"calls": 0, "timed": None, "last": None, "seed": None, "problem": None}
    untyped: list[int] = []

    def before(i: int) -> None:
        calls["timed"] = i
        calls["seed"] = sets[calls["calls"] % n].lay_out()

    def call() -> Any:
        k = calls["calls"]
        out = sets[k % n].call()
        calls["calls"] = k + 1
        if calls["timed"] is not None:
            if not exact_arrays(out):
                untyped.append(calls["timed"])
            calls["problem"] = calls["problem"] or guard.problem()
        calls["last"] = (k, out, calls["seed"])  # held until the next call returns: the last timed call survives
        return out

    times = cuda_timed(call, config, before)
    index, out, seed = calls["last"]
    calls["last"] = None
    torch.cuda.synchronize()
    s = sets[index % n]
    record = after_call(len(times.samples) - 1, s, seed, out, None, backend, guard)
    record.set_index = index % n
    record.problem = record.problem or calls["problem"]
    return Loop(samples=times.samples, kept=[record], untyped=untyped, warmup_s=times.warmup_s, loop_s=times.loop_s,
                captures_s=0.0, expected=len(times.samples))


state.watch_module(sys.modules[__name__])  # no function or class of the loop may be replaced by a call
