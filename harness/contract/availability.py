"""Whether an implementation can run a case here, asked without running plugin code in the command's process.

An implementation's ``available=`` check is plugin code like any other: it may hang, exit, segfault or
print. So the command's process reads only the declaration (:meth:`Implementation.declared_gaps`) and
hands the check itself to a worker (:mod:`harness.runtime.isolation`), under the run's time limit. A check that
raises is a reason (the case is skipped, the reason says what it raised); one whose worker crashed,
exited or timed out is that outcome, which the caller records as the case's own cell (a problem that
fails the run), never a dead or silently green command. A check that crashed or hung is not asked again (its
failure stands for the cases after it, and says on which case it happened).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from harness.contract.registry import Implementation
from harness.runtime.isolation import DEFAULT_TIMEOUT_S, OK, Outcome, Task, WorkerPool


def availability_task(source: str, name: str, case: Any) -> list[str]:
    """Worker: every reason implementation ``name`` (from ``source`` alone) cannot run ``case``, its check included."""
    from harness.contract.discovery import load_implementation

    return load_implementation(source, name).not_supported_reasons(case)


_FAILED: dict[tuple[str, str], Outcome] = {}
"""(name, source) -> the outcome of a check that crashed or hung, for this process's runs."""


def unsupported(impl: Implementation, case: Any, source: str, pool: WorkerPool) -> list[str] | Outcome:
    """The reasons ``impl`` cannot run ``case`` (empty: it can), or the failed outcome of its ``available=``
    check (crash, timeout, error loading it) for the caller to record as the case's cell."""
    gaps = impl.declared_gaps(case)
    if gaps or impl.available is None:
        return gaps
    key = (impl.name, source)
    if key in _FAILED:
        return _FAILED[key]
    outcome = pool.run(Task((impl.name, "available"), availability_task, (source, impl.name, case)))
    if outcome.status == OK:
        return list(outcome.value)
    outcome.error = (f"its available= check failed on case {getattr(case, 'id', case)}; not asked again in this run: "
                     f"{outcome.error}")
    _FAILED[key] = outcome  # a check that crashed or hung once is not given a worker per case to do it again
    return outcome


def reasons_or_failure(answer: list[str] | Outcome) -> list[str]:
    """An answer of :func:`unsupported` as reasons alone (a failed check is its reason): for listings."""
    if isinstance(answer, Outcome):
        return [f"{answer.status}: {answer.error}"]
    return answer


@contextmanager
def checking(timeout: float = DEFAULT_TIMEOUT_S) -> Iterator[WorkerPool]:
    """A worker pool for availability checks where no run's own worker serves (listings, a cluster's driver)."""
    with WorkerPool(timeout=timeout, start_method="forkserver") as pool:
        yield pool
