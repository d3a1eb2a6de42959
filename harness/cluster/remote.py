"""The node's side: a Ray task runs plugin code in the same isolated worker processes as a local run.

A Ray task never calls plugin code itself. It hands the call to a
:class:`~harness.isolation.WorkerPool` kept in the Ray worker process (one per group, e.g. one
per implementation, the least recently used closed beyond :data:`MAX_POOLS`), so a segfault or a
hang is the same ``crash`` or ``timeout`` outcome with its reason as on the local executor, and
the Ray worker lives on. Only the loss of the Ray worker or of its node is Ray's to handle: the
task is retried elsewhere (bounded) and, when the retries are spent, recorded as a crash by the
driver (:mod:`harness.cluster.stream`).
"""

from __future__ import annotations

import os
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from harness.cluster.node import node_identity
from harness.isolation import OK, Outcome, Task, WorkerPool

MAX_POOLS = 3
"""Worker processes (with torch loaded) one Ray worker keeps alive at once."""

_POOLS: OrderedDict[tuple[Any, ...], tuple[WorkerPool, list[bool]]] = OrderedDict()


@dataclass
class NodeResult:
    """What a task sends back: its outcomes, where it ran, and when it held the node."""

    outcomes: dict[str, Outcome]
    node: dict[str, Any]
    started_at: float
    ended_at: float
    extra: dict[str, Any] = field(default_factory=dict)


def pool_for(group: tuple[Any, ...], timeout: float, start_method: str) -> tuple[WorkerPool, list[bool]]:
    """This Ray worker's pool for ``group`` and a one-item list ``[warm]`` (False until warmed up)."""
    if group in _POOLS:
        _POOLS.move_to_end(group)
        return _POOLS[group]
    while len(_POOLS) >= MAX_POOLS:
        _, (old, _) = _POOLS.popitem(last=False)
        old.close()
    entry = (WorkerPool(timeout=timeout, start_method=start_method), [False])
    _POOLS[group] = entry
    return entry


def run_in_pool(group: tuple[Any, ...], task: Task, *, timeout: float, start_method: str = "forkserver",
                warm_up: Task | None = None) -> Outcome:
    """``task`` in this node's isolated worker for ``group``; a fresh worker runs ``warm_up`` first
    (imports, registry), so that the case's time limit times the case only."""
    pool, warm = pool_for(group, timeout, start_method)
    if pool._worker is None or not pool._worker.process.is_alive():
        warm[0] = False
    if warm_up is not None and not warm[0]:
        outcome = pool.run(warm_up)
        if outcome.status != OK:
            outcome.error = f"worker start-up failed: {outcome.error}"
            return outcome
        warm[0] = True
    return pool.run(task)


Body = Callable[..., tuple[dict[str, Outcome], dict[str, Any]]]


def on_node(body: Body, args: tuple[Any, ...], environment: dict[str, str]) -> NodeResult:
    """The Ray task every cell runs as: set the worker processes' environment (thread counts), run
    ``body(*args)`` (which runs its calls through :func:`run_in_pool` and returns its outcomes and
    anything else to send back) and say where and when."""
    os.environ.update(environment)
    started = time.time()
    outcomes, extra = body(*args)
    return NodeResult(outcomes, node_identity(), started, time.time(), extra)
