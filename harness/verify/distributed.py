"""verify on a Ray cluster: every case is a Ray task; its checks run in the node's isolated worker.

Checks are not timed, so they fan out freely: one CPU each, as many at once as the cluster has
CPUs (a window of twice that keeps the nodes fed while the driver decides what comes next).
Each case's outcome comes back with the node it ran on and is written by the same
:class:`~harness.verify.runner.VerifyRun` code as a local run's, so the cells, statuses and
reasons are the local executor's, plus ``node``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from harness.cluster.remote import run_in_pool
from harness.cluster.stream import Submitter, placement, stream
from harness.isolation import CRASH, THREAD_VARIABLES, Outcome, Task
from harness.registry import Implementation

if TYPE_CHECKING:
    from harness.cluster.remote import NodeResult
    from harness.verify.runner import VerifyRun

Item = tuple[Implementation, Any, str | None]


def check_on_node(plugins: tuple[str, ...], name: str, case: Any, trials: int, threads: int,
                  timeout: float) -> tuple[dict[str, Outcome], dict[str, Any]]:
    """On a node: every check of one case, in this node's worker process for ``name``."""
    from harness.verify.runner import WARM_UP_TIMEOUT_S, run_case, warm_up

    warm = Task((name, "warm-up"), warm_up, (plugins, name, threads), timeout=max(timeout, WARM_UP_TIMEOUT_S))
    task = Task((name, case.id), run_case, (plugins, name, case, trials, threads))
    return {"case": run_in_pool(("verify", plugins, name), task, timeout=timeout, warm_up=warm)}, {}


def run_on_cluster(run: VerifyRun, plans: list[tuple[Implementation, list[Any], str | None]], threads: int) -> None:
    """Every case of ``plans`` as a Ray task on ``run.cluster``; cells written as results arrive."""
    cluster = run.cluster
    environment = {name: str(threads) for name in THREAD_VARIABLES} if threads >= 1 else {}
    submit = Submitter(cluster, placement(cluster, timing=False, device="cpu"), environment)

    def items() -> Iterator[Item]:
        for impl, cases, reason in plans:
            if reason is not None:
                yield impl, None, reason
            for case in cases:
                yield impl, case, None

    def settle(impl: Implementation, case: Any, reason: str) -> None:
        run._add(impl, case, {"check": "output", "status": "skipped", "reason": reason, "metrics": {}}, 0.0)
        with run._lock:
            run._progress.advance(impl.name if case is None else f"{impl.name} {case.id}")

    def submit_item(item: Item) -> Any | None:
        impl, case, reason = item
        if case is None:
            settle(impl, None, str(reason))
            return None
        unsupported = impl.not_supported_reasons(case)
        if unsupported:
            settle(impl, case, "; ".join(unsupported))
            return None
        return submit(check_on_node, cluster.plugins, impl.name, case, run.trials, threads, run.timeout)

    def on_done(item: Item, result: NodeResult | None, lost: str | None) -> None:
        impl, case, _ = item
        outcome = Outcome(CRASH, error=lost) if result is None else result.outcomes["case"]
        run._record(impl, case, outcome, node=None if result is None else result.node)
        with run._lock:
            run._progress.advance(f"{impl.name} {case.id}")

    stream(cluster.ray, items(), submit_item, 2 * cluster.cpus() + 2, on_done)
    run._flush(force=True)
