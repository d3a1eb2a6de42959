"""The plugins a bench times, as the parent knows them: records read in a worker, never imported here.

A plugin's import runs its code, and the bench's parent is where every verdict is reached and every
timed call is clocked (:mod:`harness.bench.driven`): a plugin imported there could slow that clock or
rewrite the judge. So the parent asks a worker (spawned, and discarded afterwards)
to load the registry and send back each implementation's declaration as plain data: its name, source,
kind, backend, description and declared capabilities, with the callables replaced by harness
functions that refuse to run (:func:`not_here`). What the parent does with a record, reading
its capabilities and ``declared_gaps``, runs no plugin code; a plugin's own ``available=`` check and
every call run in the implementation's workers, as before.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from harness.contract.discovery import Registry, load_registry
from harness.contract.registry import Implementation
from harness.errors import PluginError
from harness.runtime.isolation import OK, Task, WorkerPool

LOAD_TIMEOUT_S = 600.0
"""Importing every plugin (a C++ extension may build on first import)."""


def not_here(*args: Any, **kwargs: Any) -> Any:
    """Stands in for a plugin's callable in the parent's record: plugin code never runs in bench's parent."""
    raise RuntimeError("bench's parent holds a plugin's declaration only: its code runs in its own workers")


def not_here_check(case: Any) -> str | None:
    """Stands in for an ``available=`` check (that there is one is what the parent reads)."""
    raise RuntimeError("bench's parent holds a plugin's declaration only: its checks run in its own workers")


def record(impl: Implementation) -> Implementation:
    """``impl``'s declaration, its callables replaced by :func:`not_here` (picklable, and no plugin code)."""
    check = None if impl.available is None else not_here_check
    return dataclasses.replace(impl, prepare=not_here, available=check)


def catalogue_task(specs: list[str]) -> Registry:
    """Worker: load the registry from ``specs`` and return it as records (:func:`record`)."""
    loaded = load_registry(specs)
    records = Registry(errors=list(loaded.errors), notes=list(loaded.notes), sources=dict(loaded.sources))
    records.implementations = {name: record(impl) for name, impl in loaded.implementations.items()}
    return records


def load_catalogue(specs: list[str]) -> Registry:
    """The registry of ``specs`` as records, loaded in a worker of its own; a worker that fails to load them
    (a plugin that crashes the interpreter on import) is a :class:`~harness.errors.PluginError`."""
    with WorkerPool(timeout=LOAD_TIMEOUT_S, start_method="forkserver") as pool:
        outcome = pool.run(Task("plugins", catalogue_task, (list(specs),)))
    if outcome.status != OK:
        raise PluginError(f"loading the plugins failed in their worker ({outcome.status}): {outcome.error}")
    registry: Registry = outcome.value
    return registry
