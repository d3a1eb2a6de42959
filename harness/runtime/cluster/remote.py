"""The node's side: a Ray task runs plugin code in the same isolated worker processes as a local run.

A Ray task never calls plugin code itself. It hands the call to a
:class:`~harness.runtime.isolation.WorkerPool` kept in the Ray worker process (one per group, e.g. one
per implementation, the least recently used closed beyond :data:`MAX_POOLS`), so a segfault or a
hang is the same ``crash`` or ``timeout`` outcome with its reason as on the local executor, and
the Ray worker lives on. Only the loss of the Ray worker or of its node is Ray's to handle: the
task is retried elsewhere (bounded) and, when the retries are spent, recorded as a crash by the
driver (:mod:`harness.runtime.cluster.stream`).
"""

from __future__ import annotations

import os
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from harness.runtime.cluster.node import NodeIdentity, node_identity
from harness.runtime.isolation import OK, Outcome, Task, WorkerPool

MAX_POOLS = 3
"""Worker processes (with torch loaded) one Ray worker keeps alive at once."""

_POOLS: OrderedDict[tuple[Any, ...], tuple[WorkerPool, list[bool]]] = OrderedDict()


@dataclass
class NodeResult:
    """What a task sends back: its outcomes, where it ran, and when it held the node."""

    outcomes: dict[Any, Outcome]
    """Keyed as the task's body keys them (a worker's name, a record's typed key)."""
    node: NodeIdentity
    started_at: float
    ended_at: float
    extra: dict[str, object] = field(default_factory=dict)


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
    (imports, registry), so that the case's time limit times the case only. Its workers do not run the Ray
    worker's main script (:func:`~harness.runtime.isolation.main_script_hidden`)."""
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


Body = Callable[..., tuple[dict[Any, Outcome], dict[str, object]]]


def _raylet_priority() -> None:
    """Run at the raylet's priority, not the lower one Ray gives its workers.

    Ray starts every worker at niceness 15 (``RAY_worker_niceness``) so that the raylet stays responsive.
    The plugin's calls run in this worker's children and inherit it: on a node that anything else keeps
    busy they then get a few percent of a core (measured: a small-suite verify on a two-node local cluster
    at load 3 on 2 cores took 91-119 s at niceness 15 against 6 s locally), so an honest kernel's cell
    runs slow and a check can run out of time. Where the system allows it (root, ``CAP_SYS_NICE``, or a
    ``RLIMIT_NICE`` that permits it), this worker returns to its raylet's niceness before any worker
    process starts; where it does not, the workers keep Ray's (start the nodes with
    ``RAY_worker_niceness=0``, docs/cluster.md)."""
    try:
        here = os.getpriority(os.PRIO_PROCESS, 0)
        raylet = os.getpriority(os.PRIO_PROCESS, os.getppid())
        if raylet < here:
            os.setpriority(os.PRIO_PROCESS, 0, raylet)
    except OSError:  # not permitted here, or the raylet already gone: the worker keeps Ray's niceness
        pass


def on_node(body: Body, args: tuple[Any, ...], environment: dict[str, str]) -> NodeResult:
    """The Ray task every cell runs as: set the worker processes' environment (thread counts) and
    priority, run ``body(*args)`` (which runs its calls through :func:`run_in_pool` and returns its
    outcomes and anything else to send back) and say where and when."""
    os.environ.update(environment)
    _raylet_priority()
    started = time.time()
    outcomes, extra = body(*args)
    return NodeResult(outcomes, node_identity(), started, time.time(), extra)
