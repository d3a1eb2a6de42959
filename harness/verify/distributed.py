"""verify on a Ray cluster: cases go out in small batches of one implementation, each a Ray task
whose checks run in the node's isolated worker.

Checks are not timed, so they fan out freely: one CPU each, as many at once as the cluster has
CPUs (a window of twice that keeps the nodes fed while the driver decides what comes next).

Why batches, not one task per case: a Ray task costs about 9 ms of the driver's CPU and more in the
raylets (measured on a two-node local cluster), while a quick-suite case takes 30 ms on average, so
with one task per case the checks themselves ran 1.6x slower than locally (the cores busy with Ray).
A batch of up to :data:`MAX_CASES_PER_TASK` cases of one implementation keeps that overhead small and its
worker warm; each case still has its own time limit, and a hang or a crash is that case's outcome,
as locally. A batch's outcomes come back together, and each is written by the same
:class:`~harness.verify.runner.VerifyRun` code as a local run's: the cells, statuses and reasons are
the local executor's, plus ``node``. A batch lost with its node is retried elsewhere as a whole.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from harness.contract.availability import checking, unsupported
from harness.contract.registry import Implementation
from harness.runtime.cluster.node import NodeIdentity
from harness.runtime.cluster.remote import run_in_pool
from harness.runtime.cluster.stream import Submitter, placement, stream
from harness.runtime.isolation import CRASH, THREAD_VARIABLES, Outcome, Task

if TYPE_CHECKING:
    from harness.runtime.cluster.connect import RayCluster
    from harness.runtime.cluster.remote import NodeResult

MAX_CASES_PER_TASK = 32
"""At most this many cases of one implementation per Ray task (about a second of work in quick)."""
TASKS_PER_CPU = 8
"""At least this many tasks per CPU of the cluster, where the cases allow, so that the nodes finish
together and the result file keeps moving as results land."""


def batch_size(cases: int, cpus: int) -> int:
    """Cases per task for a run of ``cases`` cases on ``cpus`` CPUs: 32 for the quick suite's 1,700
    cases on two CPUs (measured: wall time 1.20x the local executor's, against 1.31x with 8)."""
    return max(1, min(MAX_CASES_PER_TASK, cases // (TASKS_PER_CPU * max(1, cpus))))

Item = tuple[Implementation, list[Any]]


class CaseSink(Protocol):
    """Where a cluster's outcomes go: the run that planned the cases (:class:`~harness.verify.runner.VerifyRun`)
    writes them exactly as it writes a local run's."""

    sources: Mapping[str, str]
    trials: int
    timeout: float

    def skip(self, impl: Implementation, case: Any, reason: str) -> None: ...
    def stopped(self, impl: Implementation) -> bool: ...
    def stop_reason(self, impl: Implementation) -> str: ...
    def record(self, impl: Implementation, case: Any, outcome: Outcome, node: NodeIdentity | None = None) -> None: ...
    def flush(self) -> None: ...


def check_on_node(source: str, name: str, cases: list[Any], trials: int, threads: int,
                  timeout: float) -> tuple[dict[str, Outcome], dict[str, object]]:
    """On a node: every check of each of ``cases``, one after another in this node's worker for ``name``;
    outcomes keyed by the case's position in ``cases``."""
    from harness.verify.worker import WARM_UP_TIMEOUT_S, run_case, warm_up

    warm = Task((name, "warm-up"), warm_up, (source, name, threads), timeout=max(timeout, WARM_UP_TIMEOUT_S))
    outcomes = {}
    for index, case in enumerate(cases):
        task = Task((name, case.id), run_case, (source, name, case, trials, threads))
        outcomes[str(index)] = run_in_pool(("verify", source, name), task, timeout=timeout, warm_up=warm)
    return outcomes, {}


def batches(cases: list[Any], size: int) -> Iterator[list[Any]]:
    for start in range(0, len(cases), size):
        yield cases[start:start + size]


def run_on_cluster(run: CaseSink, plans: list[tuple[Implementation, list[Any], str | None]], threads: int,
                   cluster: RayCluster) -> None:
    """Every case of ``plans`` on ``cluster``, in batches of Ray tasks; cells written to ``run`` as results arrive."""
    environment = {name: str(threads) for name in THREAD_VARIABLES} if threads >= 1 else {}
    submit = Submitter(cluster, placement(cluster, timing=False, device="cpu"), environment)
    size = batch_size(sum(len(cases) for _, cases, _ in plans), cluster.cpus())

    def items() -> Iterator[Item]:
        for impl, cases, reason in plans:
            if reason is not None:
                run.skip(impl, None, reason)
                continue
            supported = []
            for case in cases:  # its available= check in a worker here, as in a local run
                answer = unsupported(impl, case, run.sources[impl.name], pool)
                if isinstance(answer, Outcome):
                    run.record(impl, case, answer)
                elif answer:
                    run.skip(impl, case, "; ".join(answer))
                else:
                    supported.append(case)
            for batch in batches(supported, size):  # --maxfail: batches already out finish; no new one starts
                if run.stopped(impl):
                    for case in batch:
                        run.skip(impl, case, run.stop_reason(impl))
                else:
                    yield impl, batch

    def submit_item(item: Item) -> Any | None:
        impl, cases = item
        return submit(check_on_node, cluster.remote_source(run.sources[impl.name]), impl.name, cases, run.trials, threads, run.timeout)

    def on_done(item: Item, result: NodeResult | None, lost: str | None) -> None:
        impl, cases = item
        for index, case in enumerate(cases):
            outcome = Outcome(CRASH, error=lost) if result is None else result.outcomes[str(index)]
            run.record(impl, case, outcome, node=None if result is None else result.node)

    with checking(run.timeout) as pool:
        stream(cluster.ray, items(), submit_item, 2 * cluster.cpus() + 2, on_done)
    run.flush()
