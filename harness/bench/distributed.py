"""bench on a Ray cluster: each cell a Ray task that holds a whole node, peaks per kind of node.

Placement (:func:`harness.runtime.cluster.stream.placement`): a CPU cell takes the node's whole
``attnbench_node`` resource, a CUDA cell one GPU, so no two timing cells ever share a node (or a
GPU); at most that many cells are in flight, and each is decided (capabilities, time and memory
budget) only when a slot frees, from the cells measured before it, as on the local executor.
On the node the cell runs in the same isolated timing and memory workers as locally
(:func:`cell_on_node`) and comes back with the node's identity and the times it held the node.

Peaks: before the cells, each node measures the GEMM peak of every (dtype, device) the plan needs,
holding the node as a cell does; readings are kept per node *kind* (the higher one when several
nodes of a kind answer) under ``"<dtype>/<device>@<kind>"``, and each cell's % of peak divides by
its own kind's. The memory bandwidth (the roofline's other roof) is measured there too, per device
and thread count, under ``"<device>/threads=<n>@<kind>"``. After the cells each kind is measured
again and the higher reading kept.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from harness.bench.cell_timing import Measured
from harness.bench.judging import new_cell, skipped_cell
from harness.bench.roof_readings import confirmed, higher
from harness.bench.sweeps import PlannedCell
from harness.bench.tasks import bandwidth_task, clock_for, memory_task, peak_task, timing_task, warm_up_task
from harness.bench.timing import TimingConfig
from harness.contract.availability import checking, unsupported
from harness.results import Bandwidth, BandwidthKey, Node, Peak, PeakKey, Status
from harness.runtime.cluster.connect import NODE_RESOURCE
from harness.runtime.cluster.remote import run_in_pool
from harness.runtime.cluster.stream import Submitter, placement, stream
from harness.runtime.isolation import OK, THREAD_VARIABLES, Outcome, Task

WARM_UP_TIMEOUT_S = 300.0
"""A fresh worker on a node may compile an extension before its first cell (about a minute, more when busy)."""

if TYPE_CHECKING:
    from harness.bench.runner import BenchRunner
    from harness.runtime.cluster.connect import RayCluster
    from harness.runtime.cluster.remote import NodeResult


def cell_on_node(name: str, source: str, case: dict[str, object], mode: str, timing: TimingConfig,
                 threads: int | None, memory: bool, timeout: float) -> tuple[dict[str, Outcome], dict[str, object]]:
    """On a node: time one cell and measure its memory in this node's workers for ``name``."""
    args = (name, source, case, mode)
    warm = Task(name, warm_up_task, (name, source), timeout=max(timeout, WARM_UP_TIMEOUT_S))
    outcomes = {"timing": run_in_pool(("timing", source, name), Task(name, timing_task, args + (timing, threads),
                                                                     end_leftovers=True),
                                      timeout=timeout, start_method="spawn", warm_up=warm)}
    if memory and outcomes["timing"].status == OK:
        # no warm-up here: the memory worker sets its allocator up before anything else (as locally);
        # the timing worker has just built or loaded whatever the implementation needs on this node
        outcomes["memory"] = run_in_pool(("memory", source, name), Task(name, memory_task, args + (threads,)),
                                         timeout=timeout, start_method="spawn")
    return outcomes, {"load_average": os.getloadavg()[0]}


def peaks_on_node(keys: list[tuple[str, str]], threads: int | None, timeout: float, timing: TimingConfig
                  ) -> tuple[dict[PeakKey | BandwidthKey, Outcome], dict[str, object]]:
    """On a node: the GEMM peak of each (dtype, device) and the memory bandwidth of each device, in a
    worker that never runs plugin code; keyed by their records' keys on no kind (the caller knows the node's).
    Read as a local run reads them (:class:`~harness.bench.roof_readings.RoofReadings`): on the cells' clock
    and within the run's roof budget."""
    outcomes: dict[PeakKey | BandwidthKey, Outcome] = {
        PeakKey(dtype, device): run_in_pool(
            ("peak",), Task(dtype, peak_task, (dtype, device, threads, clock_for(timing, device), timing.roof_budget_s)),
            timeout=timeout, start_method="spawn")
        for dtype, device in keys}
    for device in sorted({device for _, device in keys}):
        outcomes[BandwidthKey(device, threads)] = run_in_pool(
            ("peak",), Task(device, bandwidth_task, (device, threads, clock_for(timing, device), timing.roof_budget_s)),
            timeout=timeout, start_method="spawn")
    return outcomes, {}


class ClusterPeaks:
    """The run's ``peaks`` record, per node kind; measured on every node, the higher reading kept per kind."""

    def __init__(self, runner: BenchRunner, cluster: RayCluster, submit: Submitter) -> None:
        self.runner, self.cluster, self.submit = runner, cluster, submit
        self.kinds_nodes: dict[str, str] = {}
        """kind -> the id of a node of that kind (where its peaks are measured again)."""

    def measure(self, nodes: list[str], keys: list[tuple[str, str]], *, confirm: bool) -> None:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        cluster = self.cluster
        settings = self.runner.settings
        refs = [self.submit(peaks_on_node, keys, settings.threads, settings.timeout_s, settings.timing,
                            scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)) for node in nodes]
        for ref in refs:
            try:
                result: NodeResult = cluster.ray.get(ref)
            except cluster.ray.exceptions.RayError:
                continue  # that node is gone; its kind is measured on another node, or keeps its first reading
            self.record(result, confirm=confirm)

    def record(self, result: NodeResult, *, confirm: bool) -> None:
        node = Node.from_json(result.node)
        kind = node.kind or ""
        self.kinds_nodes.setdefault(kind, node.node_id or "")
        peaks = dict(self.runner.roofs.peaks)
        bandwidth = dict(self.runner.roofs.bandwidth)
        for base, outcome in result.outcomes.items():
            if isinstance(base, BandwidthKey):
                self._record_bandwidth(bandwidth, base.on(kind), outcome, node, confirm=confirm)
                continue
            key = base.on(kind)
            reading: Peak | None = outcome.value if outcome.status == OK else None
            peak = peaks.get(key)
            if peak is None or not peak.gflops:
                failed = Peak(error=f"{outcome.status}: {outcome.error}")
                peaks[key] = replace(reading, node=node) if reading is not None else failed
                continue
            peaks[key] = confirmed(peak, reading) if confirm else higher(peak, reading)
        self.runner.roofs.set_peaks(peaks)
        if bandwidth:
            self.runner.roofs.set_bandwidth(bandwidth)

    @staticmethod
    def _record_bandwidth(records: dict[BandwidthKey, Bandwidth], key: BandwidthKey, outcome: Outcome, node: Node, *,
                          confirm: bool) -> None:
        """As the local runner keeps it: the first reading, then the higher of it and a confirming one."""
        reading: Bandwidth | None = outcome.value if outcome.status == OK else None
        record = records.get(key)
        if record is None or not record.read_gbps:
            records[key] = (replace(reading, node=node) if reading is not None
                            else Bandwidth(error=f"{outcome.status}: {outcome.error}"))
            return
        if reading is not None:
            records[key] = record.higher(reading, confirm=confirm)

    def slowest(self, dtype: str, device: str) -> float | None:
        """The lowest peak of any kind for this dtype: budget predictions must hold on the slowest node."""
        found = [p.gflops for k, p in self.runner.roofs.peaks.items()
                 if (k.dtype, k.device) == (dtype, device) and k.kind is not None and p.gflops]
        return min(found) if found else None


def run_on_cluster(runner: BenchRunner, todo: list[PlannedCell], cluster: RayCluster) -> None:
    """Measure ``todo`` on ``cluster``; cells are written as their results arrive."""
    settings = runner.settings
    slots = cluster.timing_slots(settings.device)
    environment = {name: str(settings.threads) for name in THREAD_VARIABLES} if settings.threads else {}
    submit = Submitter(cluster, placement(cluster, timing=True, device=settings.device), environment)
    peaks = ClusterPeaks(runner, cluster, submit)
    resource = "GPU" if settings.device == "cuda" else NODE_RESOURCE
    nodes = [n["NodeID"] for n in cluster.nodes() if n.get("Resources", {}).get(resource)]
    keys = sorted({(c.case.dtype, c.case.device) for c in todo})
    peaks.measure(nodes, keys, confirm=False)
    predicted: dict[Any, float] = {}

    def submit_cell(cell: PlannedCell) -> Any | None:
        impl = runner.registry.get(cell.implementation)
        reasons = unsupported(impl, cell.case.with_(grad=cell.mode != "fwd"), runner.registry.sources[cell.implementation],
                              pool)  # its available= check in a worker here, as in a local run
        if isinstance(reasons, Outcome):
            runner.write(new_cell(cell, Status(reasons.status), reasons.error))
            return None
        if reasons:
            runner.write(skipped_cell(cell, "; ".join(reasons)))
            return None
        peak = peaks.slowest(cell.case.dtype, cell.case.device)
        over = runner.budget.check(cell, peak)
        if over:
            runner.write(skipped_cell(cell, over))
            return None
        predicted[cell.key] = runner.budget.cell_seconds_predicted(cell, peak)
        source = cluster.remote_source(runner.registry.sources[cell.implementation])
        return submit(cell_on_node, cell.implementation, source, cell.case.to_dict(), cell.mode,
                      settings.timing, settings.threads, settings.memory, settings.timeout_s)

    def on_done(cell: PlannedCell, result: NodeResult | None, lost: str | None) -> None:
        if result is None:
            runner.write(new_cell(cell, Status.CRASH, lost))
            return
        node = Node.from_json(result.node)
        peaks.kinds_nodes.setdefault(node.kind or "", node.node_id or "")
        where = {"node": node, "started_at": result.started_at, "ended_at": result.ended_at,
                 "load_average": result.extra.get("load_average")}
        runner.write(runner.judge(Measured(cell, result.outcomes["timing"], result.outcomes.get("memory"),
                                           predicted.get(cell.key), result.ended_at - result.started_at, where=where)))

    with checking(settings.timeout_s) as pool:
        stream(cluster.ray, todo, submit_cell, slots, on_done)
    if keys:
        peaks.measure(sorted(set(peaks.kinds_nodes.values())), keys, confirm=True)
