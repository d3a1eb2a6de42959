"""Orchestration of a verify run: cases per implementation, checks in worker processes, cells on disk.

Each implementation gets its own :class:`~harness.runtime.isolation.WorkerPool`: its plugin code
only ever runs there, one case per task, so a crash or a hang costs that case (recorded
as ``crash`` or ``timeout``) and a fresh worker takes the rest. A worker loads only the
source that declares its implementation (once per process), so no other plugin's import
runs there. Every outcome becomes verify cells written to the :class:`ResultWriter` as it
arrives, so nothing measured is lost when a later case kills the run.

Case generation and checking dispatch on ``impl.declared.kind`` through :data:`KINDS`; the
``module`` entry is imported lazily from ``harness.verify.modules`` (``module_cases``,
``check_module_case``), and module implementations are skipped with the reason when it
is not there.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from harness.contract.availability import unsupported
from harness.contract.registry import Implementation
from harness.results import CellCase, Node, ResultWriter, Status, VerifyCell
from harness.runtime.cluster.node import NodeIdentity
from harness.runtime.executor import Executor, LocalExecutor
from harness.runtime.isolation import (
    CRASH,
    ERROR,
    OK,
    THREAD_VARIABLES,
    TIMEOUT,
    Outcome,
    Task,
    WorkerPool,
    available_ram_bytes,
    kill_all_workers,
    memory_cap,
)
from harness.runtime.progress import Progress
from harness.verify.outcome import CheckResult
from harness.verify.worker import WARM_UP_TIMEOUT_S, kind_functions, run_case, warm_up

if TYPE_CHECKING:
    from harness.runtime.cluster.connect import RayCluster
    from harness.verify.model_cases import ModelPlan

FLUSH_SHARE = 0.05  # how much of the time between two unforced rewrites of the result file a rewrite may take
# ---- parent side ----------------------------------------------------------------------------

def case_group(case: Any) -> str:
    """A coarse label of what a case exercises, for grouping in reports."""
    if getattr(case, "kind", "kernel") != "kernel":
        return str(case.kind)
    if case.growth:
        return "error_growth"
    for label, hit in (("grad", case.grad), ("bias", case.bias != "none"), ("structure", bool(case.structures)),
                       ("mask", case.mask != "none"),
                       ("causal", case.causal), ("gqa", case.kv_heads != case.heads),
                       ("layout", case.layout != "contiguous"), ("inputs", case.inputs != "randn" or case.scale),
                       ("self", case.self_attention)):
        if hit:
            return label
    return "shape"


@dataclass
class VerifyRun:
    """One verify run over some implementations; cells go to ``writer`` as they come."""

    impls: list[Implementation]
    sources: Mapping[str, str]
    """Implementation name -> the source that declares it (:attr:`harness.contract.discovery.Registry.sources`)."""
    suite: str
    trials: int
    timeout: float
    writer: ResultWriter
    jobs: int = 1
    progress_enabled: bool = True
    threads: int | None = 1
    """torch threads per worker. 1 by default: verify runs many small problems, where an intra-op
    thread pool on a busy machine costs far more than it gains (measured: tiny cases 10-100x slower
    with 2 threads on 2 loaded cores); parallelism comes from ``jobs``. None: cores // jobs; 0: torch's default."""
    flush_every_s: float = 2.0
    """Rewrite the result file at most this often (and after every crash and timeout); less often when a rewrite
    costs more than :data:`FLUSH_SHARE` of the time between them."""
    model: ModelPlan | None = None
    """A catalogue model (:mod:`harness.case.models`) and its lengths: its calls are the cases, instead of the suite's."""
    workloads: list[Any] | None = None
    """Serving batches (:class:`harness.case.workload.Workload`): each one case per device, in the implementation's
    primary dtype (8 heads, d 64), instead of the suite's."""
    maxfail: int | None = None
    """After this many failing cases of an implementation, its cases not yet started are skipped (None: never)."""
    _failing: dict[str, int] = field(default_factory=dict, repr=False)
    """Implementation name -> how many of its cases had a problem cell (fail, error, crash or timeout)."""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _flushed: float = field(default=0.0, repr=False)
    _flush_cpu_s: float = field(default=0.0, repr=False)

    def plan(self) -> list[tuple[Implementation, list[Any], str | None]]:
        """(implementation, its cases, or the reason it has none) for every implementation."""
        plans: list[tuple[Implementation, list[Any], str | None]] = []
        for impl in self.impls:
            functions = kind_functions(impl.declared.kind)
            if isinstance(functions, str):
                plans.append((impl, [], functions))
            elif self.model is not None:
                from harness.verify.model_cases import model_cases_for

                cases, reason = model_cases_for(impl, self.model)
                plans.append((impl, cases, reason))
            elif self.workloads is not None:
                if impl.declared.kind != "kernel":
                    plans.append((impl, [], "a serving batch is a kernel's call; a module's calls are its layers'"))
                    continue
                from harness.verify.suites import devices_here, primary_dtype

                plans.append((impl, [w.case(dtype=primary_dtype(impl), device=device) for w in self.workloads
                                     for device in devices_here(impl)], None))
            else:
                plans.append((impl, list(functions[0](impl, self.suite)), None))
        return plans

    def run(self, executor: Executor | None = None) -> list[VerifyCell]:
        """Every planned case, where ``executor`` runs them (default: worker processes here)."""
        plans = self.plan()
        self._record_coverage(plans)
        total = sum(max(len(cases), 1) for _, cases, _ in plans)
        self._progress = Progress(total, title="verify", enabled=self.progress_enabled)
        threads = max(1, _cores() // self.jobs) if self.threads is None else self.threads
        try:
            (executor or LocalExecutor()).execute(_VerifyJob(self, plans, threads))
        finally:
            self._progress.close()
            with self._lock:
                self.writer.flush()
        return [c for c in self.writer.cells if isinstance(c, VerifyCell)]

    def _record_coverage(self, plans: list[tuple[Implementation, list[Any], str | None]]) -> None:
        """How much of each kernel implementation's pairwise space its cases exercise (for the report), and a
        failing ``coverage`` cell for a kernel whose declaration admits no case that exercises a capability it
        declares (:func:`~harness.verify.pairwise.unreached`), in each dtype its cases run in: a declaration the
        suite never tests is not a pass. A case its own ``available(case)`` refuses is a skip with
        its reason, not this."""
        from harness.verify.pairwise import SUITE_AXES, coverage, unreached

        if self.suite not in SUITE_AXES or self.model is not None or self.workloads is not None:
            return
        admitted = {impl.name: (impl, [c for c in cases if not impl.declared_gaps(c)])
                    for impl, cases, reason in plans if impl.declared.kind == "kernel" and reason is None}
        self.writer.set("coverage", {name: coverage(impl, self.suite, cases) for name, (impl, cases) in admitted.items()})
        for impl, cases in admitted.values():
            missing = unreached(impl, cases, by_dtype=True) if cases else []
            if missing:
                self._add(impl, None, CheckResult(
                    check="coverage", status="fail",
                    reason=f"declares {', '.join(missing)}, but none of the {len(cases)} {self.suite} cases its "
                           f"declaration admits exercise {'it' if len(missing) == 1 else 'them'}: a declared "
                           "capability no case tests is not a pass"), 0.0)

    def _run_plans(self, plans: list[tuple[Implementation, list[Any], str | None]], threads: int) -> None:
        if self.jobs <= 1:
            for impl, cases, reason in plans:
                self._run_impl(impl, cases, reason, threads)
            return
        executor = ThreadPoolExecutor(max_workers=self.jobs)
        longest_first = sorted(plans, key=lambda plan: -len(plan[1]))  # packs the jobs better
        futures = [executor.submit(self._run_impl, impl, cases, reason, threads) for impl, cases, reason in longest_first]
        try:
            for future in futures:
                future.result()
        except BaseException:  # Ctrl-C: no new case starts, and the running ones are abandoned now
            self._stop.set()
            kill_all_workers()
            raise
        finally:
            self._stop.set()
            executor.shutdown(wait=False, cancel_futures=True)

    def _run_impl(self, impl: Implementation, cases: list[Any], reason: str | None, threads: int) -> None:
        if reason is not None:
            self.skip(impl, None, reason)
            return
        fresh = True
        ram = available_ram_bytes()  # each of the jobs' workers may take half its share of the RAM free now
        cap = memory_cap(ram / 2 / max(self.jobs, 1)) if ram else None
        with WorkerPool(timeout=self.timeout, start_method="forkserver", memory_limit=cap) as pool:
            for case in cases:
                if self._stop.is_set():
                    return
                if self.stopped(impl):
                    self.skip(impl, case, self.stop_reason(impl))
                    continue
                reasons = impl.declared_gaps(case)  # the declaration here; its available= check in the worker
                if reasons:
                    self._add(impl, case, CheckResult(check="output", status="skipped", reason="; ".join(reasons)), 0.0)
                else:
                    outcome = None
                    if fresh:
                        outcome = pool.run(Task((impl.name, "warm-up"), warm_up, (self.sources[impl.name], impl.name, threads),
                                                timeout=max(self.timeout, WARM_UP_TIMEOUT_S)))
                        if outcome.status == OK:
                            outcome, fresh = None, False
                        elif outcome.error:
                            outcome.error = f"worker start-up failed: {outcome.error}"
                    if outcome is None:
                        answer = unsupported(impl, case, self.sources[impl.name], pool)
                        if isinstance(answer, Outcome):
                            outcome = answer
                        elif answer:
                            self._add(impl, case, CheckResult(check="output", status="skipped",
                                                              reason="; ".join(answer)), 0.0)
                            with self._lock:
                                self._progress.advance(f"{impl.name} {case.id}")
                            continue
                    if outcome is None:
                        task = Task((impl.name, case.id), run_case,
                                    (self.sources[impl.name], impl.name, case, self.trials, threads))
                        outcome = pool.run(task)
                    if self._stop.is_set():  # the run was interrupted and this worker killed: not a crash
                        return
                    fresh = fresh or outcome.status in (CRASH, TIMEOUT)
                    self._record(impl, case, outcome)
                with self._lock:
                    self._progress.advance(f"{impl.name} {case.id}")
        self._flush()

    def skip(self, impl: Implementation, case: Any, reason: str) -> None:
        """Record ``case`` (None: every case of ``impl``) as skipped for ``reason``; one step of progress."""
        self._add(impl, case, CheckResult(check="output", status="skipped", reason=reason), 0.0)
        with self._lock:
            self._progress.advance(impl.name if case is None else f"{impl.name} {case.id}")

    def record(self, impl: Implementation, case: Any, outcome: Outcome, node: NodeIdentity | None = None) -> None:
        """Record the worker's ``outcome`` of ``case`` (run on ``node``, on a cluster); one step of progress."""
        self._record(impl, case, outcome, node)
        with self._lock:
            self._progress.advance(f"{impl.name} {case.id}")

    def flush(self) -> None:
        self._flush(force=True)

    def stopped(self, impl: Implementation) -> bool:
        """Whether ``impl`` reached :attr:`maxfail` failing cases: its cases not started yet are skipped."""
        with self._lock:
            return self.maxfail is not None and self._failing.get(impl.name, 0) >= self.maxfail

    def stop_reason(self, impl: Implementation) -> str:
        with self._lock:
            failing = self._failing.get(impl.name, 0)
        return f"not run: {impl.name} had {failing} failing case{'s' * (failing != 1)} (--maxfail {self.maxfail})"

    def _record(self, impl: Implementation, case: Any, outcome: Outcome, node: NodeIdentity | None = None) -> None:
        failed = outcome.status != OK or any(r.status in ("fail", "error") for r in outcome.value)
        if failed:
            with self._lock:
                self._failing[impl.name] = self._failing.get(impl.name, 0) + 1
        if outcome.status == OK:
            results = outcome.value
            share = outcome.seconds / max(len(results), 1)
            for result in results:
                self._add(impl, case, result, share if result.seconds is None else result.seconds, node)
            return
        status = {ERROR: "error", CRASH: "crash", TIMEOUT: "timeout"}[outcome.status]
        reason = outcome.error or status
        if outcome.status == ERROR and outcome.traceback:
            reason += " | " + outcome.traceback.strip().splitlines()[-2].strip()
        self._add(impl, case, CheckResult(check="output", status=status, reason=reason), outcome.seconds, node)
        self._flush(force=True)
        if outcome.status != ERROR:
            self._progress.line(f"attnbench verify: {impl.name} {case.id}: {status}: {reason}")

    def _add(self, impl: Implementation, case: Any, result: CheckResult, seconds: float,
             node: NodeIdentity | None = None) -> None:
        cell = VerifyCell(
            implementation=impl.name, kind=impl.declared.kind, case=None if case is None else CellCase.of(case),
            case_id="-" if case is None else case.id, group="-" if case is None else case_group(case),
            check=result.check, status=Status(result.status), reason=result.reason,
            metrics=result.metrics, seconds=round(float(seconds), 4),
            node=None if node is None else Node.from_json(node))
        with self._lock:
            self.writer.append(cell)
        self._flush()

    def _flush(self, force: bool = False) -> None:
        """Write the result file whole (atomically); throttled, since each write rewrites every cell: a write of
        thousands of cells takes tenths of a second of CPU, so at most :data:`FLUSH_SHARE` of the run goes to it."""
        with self._lock:
            wait = max(self.flush_every_s, self._flush_cpu_s / FLUSH_SHARE)
            if force or time.monotonic() - self._flushed >= wait:
                started = time.thread_time()
                self.writer.flush()
                self._flush_cpu_s = time.thread_time() - started
                self._flushed = time.monotonic()


@dataclass(frozen=True)
class _VerifyJob:
    """A verify run's plans, as a :class:`~harness.runtime.executor.Job`."""

    run: VerifyRun
    plans: list[tuple[Implementation, list[Any], str | None]]
    threads: int

    def run_here(self) -> None:
        with _worker_environment(self.threads):
            self.run._run_plans(self.plans, self.threads)

    def run_on(self, cluster: RayCluster) -> None:
        from harness.verify.distributed import run_on_cluster

        run_on_cluster(self.run, self.plans, self.threads, cluster)


@contextlib.contextmanager
def _worker_environment(threads: int) -> Iterator[None]:
    """Workers spawned in this block inherit ``threads`` BLAS/OpenMP threads (NumPy's BLAS reads these
    at import; measured 2-4x faster NumPy cases on a busy 2-core machine). Variables the user set
    are kept; the parent's environment is restored afterwards."""
    if threads < 1:
        yield
        return
    added = [name for name in THREAD_VARIABLES if name not in os.environ]
    for name in added:
        os.environ[name] = str(threads)
    try:
        yield
    finally:
        for name in added:
            os.environ.pop(name, None)


def _cores() -> int:
    return os.cpu_count() or 1


def wall_clock() -> float:
    return time.perf_counter()
