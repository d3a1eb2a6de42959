"""The driver's loop: submit tasks through a bounded window, hand each result back the moment it lands.

The runners decide what to submit one item at a time (a bench cell's time budget is predicted
from the cells measured before it, as on the local executor), so at most ``window`` tasks are in
flight. Each result goes to ``on_done`` as it arrives, and the runner writes it to the result
file at once; a Ctrl-C cancels what is still in flight and leaves the file as written so far.

A task whose Ray worker or node died is retried by Ray on another node, at most
:data:`MAX_RETRIES` times; after that ``on_done`` gets the reason instead of a result, and the
runner records the cell as ``crash`` with it. Nothing already recorded is touched.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from harness.runtime import interrupts
from harness.runtime.cluster.connect import NODE_RESOURCE, RayCluster
from harness.runtime.cluster.remote import Body, NodeResult, on_node

MAX_RETRIES = 2
"""Times Ray runs a task again after its worker or node was lost (a plugin's own crash is not retried:
it is an outcome, recorded as on the local executor)."""
POLL_S = 0.5
"""How often the driver wakes while waiting, so that a Ctrl-C is handled at once."""

Item = TypeVar("Item")


def placement(cluster: RayCluster, *, timing: bool, device: str) -> dict[str, object]:
    """Ray task options: a timing cell holds its whole node (CPU) or one GPU; a check takes one CPU."""
    options: dict[str, object] = {"max_retries": MAX_RETRIES, "retry_exceptions": False}
    if not timing:
        return {**options, "num_cpus": 1}
    if device == "cuda":
        return {**options, "num_cpus": 1, "num_gpus": 1}
    return {**options, "num_cpus": 1, "resources": {NODE_RESOURCE: 1}}


class Submitter:
    """Submits :func:`~harness.runtime.cluster.remote.on_node` tasks with fixed options."""

    def __init__(self, cluster: RayCluster, options: dict[str, object], environment: dict[str, str]) -> None:
        self.ray = cluster.ray
        self.remote = cluster.ray.remote(on_node)
        self.options = options
        self.environment = environment

    def __call__(self, body: Body, *args: Any, **options: Any) -> Any:
        return self.remote.options(**{**self.options, **options}).remote(body, args, self.environment)


def lost_reason(exc: BaseException) -> str:
    """Why a task gave no result: its worker or node was lost (after the retries), or its environment failed."""
    message = (str(exc).strip().splitlines() or [""])[0][:300]
    return f"lost on the cluster after up to {MAX_RETRIES} retries: {type(exc).__name__}: {message}"


def stream(ray: Any, items: Iterable[Item], submit: Callable[[Item], Any | None], window: int,
           on_done: Callable[[Item, NodeResult | None, str | None], None]) -> None:
    """Submit ``items`` (``submit`` returns an object ref, or None for an item settled without a task),
    at most ``window`` in flight; ``on_done(item, result, None)`` or ``on_done(item, None, reason)``."""
    pending: dict[Any, Item] = {}
    try:
        for item in items:
            while len(pending) >= max(1, window):
                _collect(ray, pending, on_done)
            ref = submit(item)
            if ref is not None:
                pending[ref] = item
        while pending:
            _collect(ray, pending, on_done)
    except BaseException:  # Ctrl-C or a bug: nothing more starts; recorded cells stay as they are
        for ref in pending:
            try:
                ray.cancel(ref, force=True)
            except Exception:  # noqa: BLE001 - already finished or its node gone: nothing left to stop
                pass
        raise


def _collect(ray: Any, pending: dict[Any, Item], on_done: Callable[[Item, NodeResult | None, str | None], None]) -> None:
    ready, _ = ray.wait(list(pending), num_returns=1, timeout=POLL_S)
    interrupts.check()
    for ref in ready:
        item = pending.pop(ref)
        try:
            result = ray.get(ref)
        except ray.exceptions.RayError as exc:
            on_done(item, None, lost_reason(exc))
            continue
        on_done(item, result, None)
