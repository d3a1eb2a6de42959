"""The parent's verdict on a timed cell: is its time backed by a computation that was really done?

Judged outside the worker, on the numbers it sent back and the parent's own wall clock:

- ``implausible``: the median timed call is under the physics floor (:mod:`harness.bench.roofs`),
  or the worker's clock does not add up: its whole task took less on its clock than
  :data:`WALL_SHARE` of the parent's wall time (minus :data:`WALL_SLACK_S`), its phases do not sum to
  its total, or the loop spent more outside the timed calls than the harness's own work between
  calls can take (:data:`GAP_PER_CALL_S` per call, plus half the timed time).
- ``violation``: a time function was replaced, a timed call returned something that is not an exact,
  materialised array of its own, or left a thread it started working.
- ``wrong``: a kept timed output does not match float64 on the inputs of that call.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass

from harness.results import Accounting, Floor, Integrity, Record, Status

CPU_WINDOW_S = 0.015
"""Wall seconds after the last timed call over which the worker's CPU time is read (:mod:`harness.bench.guard`), kept
as evidence. Defined here so the parent reads the record without importing the worker's guard (and torch)."""


@dataclass(frozen=True, eq=False, kw_only=True)
class Timed(Record):
    """What a timing worker sends back for one cell: a record, so it crosses the process (or Ray) boundary
    typed, and its parts go into the cell as they are."""

    NESTED = {"integrity": Integrity}
    TUPLES = frozenset({"samples_s", "round_sizes"})
    samples_s: tuple[float, ...] = ()
    threads: int | None = None
    setup_s: float | None = None
    integrity: Integrity | None = None
    profile: tuple[tuple[str, float], ...] | None = None
    round_sizes: tuple[int, ...] | None = None
    """Samples per round when the cell was timed in rounds (:mod:`harness.bench.rounds`), in order."""

WALL_SHARE = 0.8
WALL_SLACK_S = 0.15
"""Pickling, the pipe and a busy scheduler between the parent's clock and the worker's, at most."""
GAP_PER_CALL_S = 2e-3


def _s(seconds: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds * 1e9:.3g} ns"


def judge(value: Timed | Mapping[str, object], wall_s: float | None,
          floor: Floor | Mapping[str, object] | None) -> tuple[Status, str | None]:
    """OK, or the first problem status found (implausible, violation, wrong, in that order) with every reason.
    The worker's result and the floor may be given in their stored form (JSON objects)."""
    timed = Timed.coerce(value)
    samples = list(timed.samples_s)
    record = timed.integrity or Integrity()
    found = {
        Status.IMPLAUSIBLE: _under_floor(samples, None if floor is None else Floor.coerce(floor))
        + _accounting(sum(samples), len(samples), record.accounting, wall_s),
        Status.VIOLATION: _violations(record),
        Status.WRONG: list(record.output_problems or ()),
    }
    for status, reasons in found.items():
        if reasons:  # the first status found; every reason, so the record shows all the evidence
            return status, "; ".join(r for rs in found.values() for r in rs)
    return Status.OK, None


def _under_floor(samples: list[float], roof: Floor | None) -> list[str]:
    """The cell's median call, its reported time, against the physics floor: faster than the roofs allow is no
    computation. Not the fastest call: a sample is a round trip less the fastest null trip (:mod:`harness.bench.driven`),
    and a trip's own cost varies by tens of microseconds (more on a busy machine), so in a cell of a few microseconds of
    work up to a quarter of the calls read 0 ns beside two busy loops, and one lucky call of an honest kernel can beat
    a probe's reading; a cheat that makes the cell's time faster than physics moves its median."""
    median = statistics.median(samples) if samples else None
    if not (roof is not None and roof.floor_s and median is not None and median < roof.floor_s):
        return []
    return [f"the median timed call {_s(median)} is under the physics floor {_s(roof.floor_s)} (fastest "
            f"{_s(min(samples))}) "
            f"(compute {_s(roof.compute_s or 0.0)} at {roof.compute_roof_gflops or 0.0:.4g} GFLOP/s, memory "
            f"{_s(roof.memory_s or 0.0)} at {roof.memory_roof_gbps or 0.0:.4g} GB/s: upper estimates of the roofs)"]


def _violations(record: Integrity) -> list[str]:
    """What the worker saw the calls do that a call may not: a clock replaced, something other than an exact
    array returned, a kept call's problem. CPU burnt after the calls returned (``cpu_after_s``) is kept as
    evidence, not judged: a pool that spins between calls (OpenMP's blocktime) is honest."""
    found = [record.clock] if record.clock else []
    if record.untyped:
        found.append(f"timed samples {list(record.untyped[:5])} returned something other than an "
                     "exact torch.Tensor / numpy.ndarray")
    found += list(record.kept_problems or ())
    return found





def _accounting(timed: float, calls: int, acc: Accounting | None, wall_s: float | None) -> list[str]:
    """The worker's account of its task (``timed``: its own samples' sum over ``calls``) against the parent's wall
    time and against itself."""
    if acc is None or acc.total_s is None or acc.phases_s is None or acc.loop_s is None:
        return []
    problems = []
    total = acc.total_s
    if wall_s is not None and not WALL_SHARE * wall_s - WALL_SLACK_S <= total <= wall_s / WALL_SHARE + WALL_SLACK_S:
        problems.append(f"the worker's clock counted {_s(total)} for a task that took {_s(wall_s)} on the parent's "
                        "clock: a clock was slowed or replaced")
    if not (0.95 * total - 0.02 <= acc.phases_s <= total + 0.02):
        problems.append(f"the worker's phases add up to {_s(acc.phases_s)} of its {_s(total)}: its clock "
                        "disagreed with itself")
    gap = acc.loop_s - timed - (acc.captures_s or 0.0)
    if gap < -1e-3 or gap > 0.5 * timed + GAP_PER_CALL_S * calls + 0.05:
        problems.append(f"the timed samples add up to {_s(timed)} of the timing loop's {_s(acc.loop_s)}: "
                        "the time went somewhere the samples do not show")
    return problems
