"""What one check sends back from a worker: a typed record the parent turns into a verify cell.

Its own module, free of torch, so the parent side (:mod:`harness.verify.runner`) reads results without
importing what the checks need.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from harness.results import Record


@dataclass(frozen=True, eq=False, kw_only=True)
class CheckResult(Record):
    """One check's outcome, made in a worker: the parent turns it into a verify cell. A record, so it
    crosses the process (or Ray) boundary typed and reads as ``{"check", "status", "reason", "metrics"}``."""

    ALWAYS = frozenset({"reason"})
    check: str = ""
    status: str = ""
    reason: str | None = None
    metrics: Mapping[str, object] = field(default_factory=dict)
    """The check's own numbers (errors, bounds, trials): stored in the verify cell as they are."""
    seconds: float | None = None
    """How long the check took in the worker (None: the parent shares the task's time out)."""
