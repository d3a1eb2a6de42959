"""The parent's verdict on a timed cell: is its time backed by a computation that was really done?

Judged outside the worker, on the numbers it sent back and the parent's own wall clock:

- ``implausible``: the fastest timed call is under the physics floor (:mod:`harness.bench.roofs`),
  or the worker's clock does not add up: its whole task took less on its clock than
  :data:`WALL_SHARE` of the parent's wall time (minus :data:`WALL_SLACK_S`), its phases do not sum to
  its total, or the loop spent more outside the timed calls than the harness's own work between
  calls can take (:data:`GAP_PER_CALL_S` per call, plus half the timed time).
- ``violation``: a time function was replaced, a timed call returned something that is not an exact,
  materialised array of its own, left a thread working, or the process burnt more CPU after a
  checked call returned than the thread pools' spinning plus :data:`~harness.bench.guard.CPU_MARGIN`
  of a core over the window, on every checked call that was measured.
- ``wrong``: a kept timed output does not match float64 on the inputs of that call.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness.bench.guard import CPU_MARGIN, CPU_WINDOW_S
from harness.results import Status

WALL_SHARE = 0.8
WALL_SLACK_S = 0.15
"""Pickling, the pipe and a busy scheduler between the parent's clock and the worker's, at most."""
GAP_PER_CALL_S = 2e-3


def _s(seconds: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds * 1e9:.3g} ns"


def judge(value: Mapping[str, Any], wall_s: float | None, floor: Mapping[str, Any] | None) -> tuple[Status, str | None]:
    """OK, or the first problem status found (implausible, violation, wrong, in that order) with every reason."""
    found: dict[Status, list[str]] = {Status.IMPLAUSIBLE: [], Status.VIOLATION: [], Status.WRONG: []}
    samples = list(value["samples_s"])
    record = value.get("integrity") or {}
    if floor and floor.get("floor_s") and samples and min(samples) < floor["floor_s"]:
        found[Status.IMPLAUSIBLE].append(
            f"fastest timed call {_s(min(samples))} is under the physics floor {_s(floor['floor_s'])} "
            f"(compute {_s(floor['compute_s'])} at {floor['compute_roof_gflops']:.4g} GFLOP/s, memory "
            f"{_s(floor['memory_s'])} at {floor['memory_roof_gbps']:.4g} GB/s: upper estimates of the roofs)")
    found[Status.IMPLAUSIBLE] += _accounting(samples, record.get("accounting") or {}, wall_s)
    if record.get("clock"):
        found[Status.VIOLATION].append(record["clock"])
    if record.get("untyped"):
        found[Status.VIOLATION].append(f"timed samples {record['untyped'][:5]} returned something other than an "
                                       "exact torch.Tensor / numpy.ndarray")
    found[Status.VIOLATION] += [p for p in record.get("kept_problems", [])]
    cpu = [c for c in record.get("cpu_after_s", []) if c is not None]
    spin = record.get("spin_s") or 0.0
    if cpu and min(cpu) > spin + CPU_MARGIN * CPU_WINDOW_S:
        found[Status.VIOLATION].append(
            f"the process burnt {_s(min(cpu))} of CPU in the {_s(CPU_WINDOW_S)} after each checked call returned "
            f"(thread pools spinning burn up to {_s(spin)}; margin {CPU_MARGIN:g} core): work continued after the call")
    found[Status.WRONG] += list(record.get("output_problems", []))
    for status, reasons in found.items():
        if reasons:  # the first status found; every reason, so the record shows all the evidence
            return status, "; ".join(r for rs in found.values() for r in rs)
    return Status.OK, None


def _accounting(samples: list[float], acc: Mapping[str, Any], wall_s: float | None) -> list[str]:
    if not acc:
        return []
    problems = []
    total, timed = acc["total_s"], sum(samples)
    if wall_s is not None and not WALL_SHARE * wall_s - WALL_SLACK_S <= total <= wall_s / WALL_SHARE + WALL_SLACK_S:
        problems.append(f"the worker's clock counted {_s(total)} for a task that took {_s(wall_s)} on the parent's "
                        "clock: a clock was slowed or replaced")
    if not (0.95 * total - 0.02 <= acc["phases_s"] <= total + 0.02):
        problems.append(f"the worker's phases add up to {_s(acc['phases_s'])} of its {_s(total)}: its clock "
                        "disagreed with itself")
    gap = acc["loop_s"] - timed - acc.get("captures_s", 0.0)
    if gap < -1e-3 or gap > 0.5 * timed + GAP_PER_CALL_S * len(samples) + 0.05:
        problems.append(f"the timed samples add up to {_s(timed)} of the timing loop's {_s(acc['loop_s'])}: "
                        "the time went somewhere the samples do not show")
    return problems
