"""``--executor ray`` on a real Ray cluster on this machine: a head that runs nothing (0 CPUs) and two
nodes of one CPU each with the ``attnbench_node`` resource, all on 127.0.0.1. No mocks.

One cluster serves the module (about 10 s to start) and is always shut down. Each test compares
with the local executor, or makes a fault happen by construction: a plugin waits at a gate the test
controls, and the node it waits on is removed while it waits.

The same cluster answers the checks of a cluster that answers but is not healthy, where the driver's connection
is bounded (exit 2): the head's raylet port (a gRPC server that is not the GCS), and two clusters of their own
(``ray.cluster_utils.Cluster``, a head only, shut down by the module): one whose only raylet was killed, one whose
GCS is stopped. Those three commands spend their time waiting on a limit (Ray's cut retries, the connect limit,
the probe's wait for an answer), so they start before the module's first test, side by side, and each is judged
once its run has ended while the other tests use the cluster. Only this module's own processes are ever stopped;
every server listens on 127.0.0.1 only.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # keep the driver on loopback (read at `import ray`)
ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'attnbench[ray]'); the cluster tests need it")

from ray.cluster_utils import Cluster  # noqa: E402

from harness.bench import BenchSettings, resume_settings  # noqa: E402
from harness.bench import run as bench  # noqa: E402
from harness.bench.timing import TimingConfig  # noqa: E402
from harness.results import BandwidthKey, PeakKey, Run, read_run  # noqa: E402
from harness.results.schema import cell_to_json  # noqa: E402
from harness.runtime.cluster.connect import CONNECT_LIMIT_S  # noqa: E402
from harness.runtime.cluster.exposure import listening, read_tables  # noqa: E402
from harness.verify import VerifySettings  # noqa: E402
from harness.verify import run as verify  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "reliability"))
from gates import BOUND_S, plugin_file, wait_started  # noqa: E402

pytestmark = [pytest.mark.timeout(420), pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]
BROKEN = REPO / "tests" / "verifier" / "plugins" / "broken_wrong_scale.py"

TRACER = '''
import os
import numpy as np
from harness import register

with open({log!r}, "a") as log:  # where every process that loads this plugin found it, and at what priority
    log.write(__file__ + " nice=" + str(os.getpriority(os.PRIO_PROCESS, 0)) + "\\n")


@register("traced_numpy", backend="numpy", dtypes=("float32", "float64"), causal=True, mask=True)
def traced_numpy(q, k, v, *, causal=False, mask=None, scale=None):
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    s = (q @ np.swapaxes(k, -1, -2)) * scale
    allowed = np.ones(s.shape[-2:], dtype=bool)
    if causal:
        allowed = np.tril(allowed)
    if mask is not None:
        allowed = allowed & mask
    s = np.where(allowed, s, -np.inf)
    m = s.max(-1, keepdims=True)
    p = np.exp(s - np.where(np.isfinite(m), m, 0.0))
    total = p.sum(-1, keepdims=True)
    return (p / np.where(total > 0, total, 1.0) @ v).astype(q.dtype)
'''


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    system = {"health_check_period_ms": 1000, "health_check_failure_threshold": 3, "health_check_timeout_ms": 1000}
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False,
                                                      "node_ip_address": "127.0.0.1", "_system_config": system})
    try:
        for _ in range(2):
            c.add_node(num_cpus=1, resources={"attnbench_node": 1}, node_ip_address="127.0.0.1", include_dashboard=False)
        c.wait_for_nodes()
        yield c
    finally:
        c.shutdown()


REFUSAL_BOUND_S = CONNECT_LIMIT_S + 90.0
"""A refused command's bound: the connect limit, plus the command's own start (torch, Ray imported) on a busy
machine."""
Refused = tuple[str, subprocess.CompletedProcess[str], float, Path]
"""A refused command's run: the address it was given, its process, its seconds from start to exit, and the result
file it was given."""


def _head_only() -> Cluster:
    return Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False,
                                                         "node_ip_address": "127.0.0.1"})


def _refused_verify(attnbench: Any, address: str, out: Path, env: dict[str, str]) -> Refused:
    started = time.monotonic()
    done = attnbench("verify", "--executor", "ray", "--address", address, "--only", "numpy_naive", "--json", str(out),
                     env=env, timeout=REFUSAL_BOUND_S)
    return address, done, time.monotonic() - started, out


@pytest.fixture(scope="module", autouse=True)
def refused(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory, attnbench: Any) -> Iterator[dict[str, Future[Refused]]]:
    """The three refused commands, started before the module's first test and run side by side, each against a
    cluster that answers but cannot take a driver: the module's head asked at its raylet's port, a cluster whose
    only raylet was killed (Ray told to wait 600 s for a node, as a user's environment may say; the connect limit
    8 s), and one whose GCS is stopped (SIGSTOP; the connect limit 3 s), resumed once its command has ended."""
    gone, silent, gcs = _head_only(), None, None
    try:
        raylet = gone.head_node.all_processes["raylet"][0].process
        raylet.kill()  # this module's own cluster's raylet, nothing else
        raylet.wait(timeout=30)
        silent = _head_only()
        gcs = silent.head_node.all_processes["gcs_server"][0].process
        os.kill(gcs.pid, signal.SIGSTOP)  # this module's own cluster's GCS

        out = {name: tmp_path_factory.mktemp(name) / "r.json" for name in ("not_the_gcs", "raylet_gone", "gcs_stopped")}

        def not_the_gcs() -> Refused:
            return _refused_verify(attnbench, f"127.0.0.1:{cluster.head_node.node_manager_port}", out["not_the_gcs"], {})

        def raylet_gone() -> Refused:
            return _refused_verify(attnbench, gone.address, out["raylet_gone"],
                                   {"RAY_gcs_server_request_timeout_seconds": "600", "ATTNBENCH_RAY_CONNECT_LIMIT_S": "8"})

        def gcs_stopped() -> Refused:
            try:
                return _refused_verify(attnbench, silent.address, out["gcs_stopped"], {"ATTNBENCH_RAY_CONNECT_LIMIT_S": "3"})
            finally:
                os.kill(gcs.pid, signal.SIGCONT)

        with ThreadPoolExecutor(3) as pool:
            yield {run.__name__: pool.submit(run) for run in (not_the_gcs, raylet_gone, gcs_stopped)}
    finally:
        if gcs is not None:
            os.kill(gcs.pid, signal.SIGCONT)
        if silent is not None:
            silent.shutdown()
        gone.shutdown()


def _one_error(done: subprocess.CompletedProcess[str], address: str) -> str:
    assert done.returncode == 2, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("attnbench") and "error:" in line]
    assert len(errors) == 1 and address in errors[0] and "Traceback" not in done.stderr, done.stderr[-3000:]
    return errors[0]


def test_a_loopback_cluster_listens_on_loopback_only(cluster: Cluster) -> None:
    """With RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 and a node IP of 127.0.0.1 (docs/cluster.md's recipe), Ray binds its
    GCS and raylet to 127.0.0.1, never ``*``: the kernel's own table of listening sockets says so."""
    head = cluster.head_node
    table = listening(read_tables())
    for port in (int(cluster.address.rsplit(":", 1)[1]), head.node_manager_port):
        assert table.get(port) == {"127.0.0.1"}, (port, table.get(port))


def test_connecting_keeps_the_commands_stop_signal_handler_and_warns_of_nothing_on_loopback(
        cluster: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    """ray.init in the main thread installs a SIGTERM handler that exits at once: a SIGTERM would end a Ray run
    without its `interrupted` line and resume hint (docs/isolation.md). Attached from a thread, the command's own
    handler stays; and a cluster started on loopback draws no warning about listening on every interface."""
    from harness.runtime.cluster.connect import _cluster_ports, connect

    def ours(signum: int, frame: object) -> None:
        raise AssertionError("not expected to run")

    previous = signal.signal(signal.SIGTERM, ours)
    try:
        with connect(cluster.address, ()) as connected:
            assert connected.nodes()
            assert signal.getsignal(signal.SIGTERM) is ours
            ports = _cluster_ports(connected.ray, cluster.address)  # what the listening check reads
            head = cluster.head_node
            assert ("gcs_server", int(cluster.address.rsplit(":", 1)[1])) in ports
            assert ("raylet", head.node_manager_port) in ports and any(n == "object manager" for n, _ in ports)
            table = listening(read_tables())
            assert all(table.get(port) == {"127.0.0.1"} for _, port in ports), (ports, table)
    finally:
        signal.signal(signal.SIGTERM, previous)
    err = capsys.readouterr().err
    assert "every interface" not in err and "SIGTERM handler" not in err, err


def _statuses(run: Run) -> dict[tuple[str, ...], str]:
    return {(c.key.implementation, c.key.case_id, c.key.variant): c.status.value for c in run.cells}


def _worker_node_ids(cluster: Cluster) -> set[str]:
    return {n.node_id for n in cluster.worker_nodes}


def test_verify_on_the_cluster_gives_the_local_statuses_and_ships_a_plugin_file(
        cluster: Cluster, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"  # a plugin file outside the repository
    outside.mkdir()
    log = tmp_path / "loaded-from.txt"
    tracer = outside / "traced.py"
    tracer.write_text(TRACER.format(log=str(log)))
    plugins = (str(tracer), str(BROKEN))
    only = ("numpy_naive", "traced_numpy", "broken_wrong_scale")
    on_ray = verify(VerifySettings(suite="small", only=only, plugins=plugins, executor="ray", address=cluster.address,
                                   progress=False), tmp_path / "ray.json")
    local = verify(VerifySettings(suite="small", only=only, plugins=plugins, jobs=2, progress=False), tmp_path / "local.json")

    reasons = {c.reason for c in on_ray.cells if c.status.value in ("crash", "timeout")}
    assert _statuses(on_ray) == _statuses(local), f"on the cluster, crashed or timed out: {sorted(map(str, reasons))[:5]}"
    statuses = set(_statuses(on_ray).values())
    assert "pass" in statuses and "fail" in statuses  # the broken plugin is rejected there as here
    stored = read_run(tmp_path / "ray.json")
    assert stored.complete and stored.config["executor"] == "ray"
    nodes = {c.node["node_id"] for c in stored.verify_cells() if c.node}
    assert nodes <= _worker_node_ids(cluster) and nodes, "every check ran on a worker node and says which"
    for cell in stored.verify_cells():
        if cell.status.value != "skipped":
            assert cell.node and {"hostname", "cpu_model", "gpu", "torch", "kind"} <= set(cell.node)
    loaded = set(log.read_text().split())
    assert str(tracer) in loaded  # the driver read the original
    assert any("runtime_resources" in path and path != str(tracer) for path in loaded), loaded  # the nodes, their copy
    if os.geteuid() == 0:  # allowed to undo Ray's worker niceness: the plugin ran at the raylet's, as the test's
        assert {word for word in loaded if word.startswith("nice=")} == {f"nice={os.getpriority(os.PRIO_PROCESS, 0)}"}
    assert "node" not in json.loads((tmp_path / "local.json").read_text())["cells"][0]


def test_a_bench_sweep_holds_a_whole_node_per_timing_cell(cluster: Cluster, tmp_path: Path) -> None:
    """Four cells of one torch implementation (each implementation a node times costs that node a timing worker;
    numpy's cells on the nodes are the interrupted run's below)."""
    settings = BenchSettings(only=["torch_sdpa"], overrides={"T": [64, 128], "causal": [False, True]},
                             timing=TimingConfig(warmup_s=0.01, budget_s=0.05, min_samples=3, roof_budget_s=0.01),
                             memory=False,
                             cell_budget_s=None, threads=1, memory_budget_bytes=2**30)
    on_ray = bench(BenchSettings(**{**settings.__dict__, "executor": "ray", "address": cluster.address}), tmp_path / "ray.json")
    local = bench(settings, tmp_path / "local.json")

    assert _statuses(on_ray) == _statuses(local)
    cells = read_run(tmp_path / "ray.json").bench_cells()
    assert len(cells) == 4 and all(c.status.value == "ok" for c in cells)
    by_node: dict[str, list[tuple[float, float]]] = {}
    for cell in cells:
        assert cell.node and cell.node["node_id"] in _worker_node_ids(cluster)
        assert cell.started_at is not None and cell.ended_at is not None and cell.started_at < cell.ended_at
        by_node.setdefault(cell.node["node_id"], []).append((cell.started_at, cell.ended_at))
        assert cell.peak_key == PeakKey(str(cell.case.dtype), "cpu", cell.node.kind)
        assert on_ray.pct_peak(cell) is not None  # divided by its own node kind's peak
        assert on_ray.read_bandwidth(cell) == on_ray.bandwidth[BandwidthKey("cpu", 1, cell.node.kind)].read_gbps > 0
        assert on_ray.pct_bandwidth(cell) is not None  # and by its own kind's bandwidth
    for spans in by_node.values():  # no two timing cells held one node at the same time
        spans.sort()
        assert all(end <= start for (_, end), (start, _) in zip(spans, spans[1:])), spans
    kinds = {k for k in on_ray.peaks if k.kind is not None}
    assert kinds and all(on_ray.peaks[k].get("confirmed_gflops") for k in kinds)
    # the nodes read their roofs as the local run does: within its roof budget (a smaller GEMM), on its clock
    assert {on_ray.peaks[k].n for k in kinds} == {p.n for p in local.peaks.values()}
    assert on_ray.bandwidth and all(key.kind is not None and record.get("confirmed_read_gbps") for key, record in on_ray.bandwidth.items())

    # resume on the cluster: an interrupted local file keeps its cells, the cluster measures the rest
    partial = json.loads((tmp_path / "local.json").read_text())
    partial["cells"], partial["complete"] = partial["cells"][:2], False
    (tmp_path / "resumed.json").write_text(json.dumps(partial))
    settings = dataclasses.replace(resume_settings(tmp_path / "resumed.json"), executor="ray", address=cluster.address)
    resumed = bench(settings, tmp_path / "resumed.json", resume=True)
    assert resumed.complete and _statuses(resumed) == _statuses(local)
    assert [cell_to_json(c) for c in resumed.cells[:2]] == partial["cells"]  # kept as they were
    assert all(c.node is None for c in resumed.bench_cells()[:2]) and all(c.node for c in resumed.bench_cells()[2:])


GATED = '''
import numpy as np
from harness import register


@register("gated_numpy", backend="numpy", dtypes=("float32",))
def gated_numpy(q, k, v, *, causal=False, mask=None, scale=None):
    gate("call")
    s = (q @ np.swapaxes(k, -1, -2)) * (q.shape[-1] ** -0.5 if scale is None else scale)
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True) @ v).astype(q.dtype)
'''


def test_an_interrupted_cluster_run_leaves_a_file_that_resume_finishes(cluster: Cluster, tmp_path: Path) -> None:
    gated = plugin_file(tmp_path, GATED)
    out = tmp_path / "bench.json"
    argv = ["bench", "--only", "numpy_naive,gated_numpy", "--T", "64", "128",
            "--roof-budget", "0.01", "--budget", "0.02", "--min-samples", "2",
            "--no-memory", "--threads", "1"]
    proc = subprocess.Popen([sys.executable, "-m", "harness", *argv, "--plugin", str(gated), "--executor", "ray",
                             "--address", cluster.address, "--out", str(out)],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_started(tmp_path, "call", proc)  # a gated cell holds a node: the driver is waiting on it
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=BOUND_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130 and f"attnbench bench --resume {out}" in stderr, stderr
    partial = json.loads(out.read_text())
    assert not partial["complete"] and partial["config"]["executor"] == "ray"
    assert {c["implementation"] for c in partial["cells"]} == {"numpy_naive"}  # what finished before the Ctrl-C
    (tmp_path / "call.release").write_text("")
    done = subprocess.run([sys.executable, "-m", "harness", "bench", "--resume", str(out), "--plugin", str(gated),
                           "--executor", "ray", "--address", cluster.address], cwd=tmp_path,
                          capture_output=True, text=True, timeout=BOUND_S)
    assert done.returncode == 0, done.stderr
    final = json.loads(out.read_text())
    assert final["complete"] and final["cells"][:len(partial["cells"])] == partial["cells"]
    assert len(final["cells"]) == 4 and all(c["status"] == "ok" and c["node"] for c in final["cells"])


def _raylet_of(pid: int, cluster: Cluster) -> Any:
    """The cluster node whose raylet is an ancestor of process ``pid`` (Ray workers are its children)."""
    raylets = {node.all_processes["raylet"][0].process.pid: node for node in cluster.worker_nodes}
    while pid > 1:
        if pid in raylets:
            return raylets[pid]
        pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    raise AssertionError("the gated plugin does not run under any worker node of the cluster")


def _wait_gone(pid: int) -> None:
    deadline = time.monotonic() + BOUND_S
    while time.monotonic() < deadline:
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                return  # a zombie: dead, not yet reaped
        except OSError:
            return
        time.sleep(0.05)
    raise AssertionError(f"process {pid} outlived its node by {BOUND_S:g} s")


def test_a_grpc_server_that_is_not_the_gcs_is_refused_in_bounded_time(cluster: Cluster,
                                                                        refused: dict[str, Future[Refused]]) -> None:
    """The head's raylet port answers HTTP/2 as the GCS does, but is not it: Ray's own attempts at the cluster id
    are cut (harness.runtime.cluster.connect.RAY_LIMITS), so its error comes, as exit 2, well within the connect limit."""
    address, done, took, out = refused["not_the_gcs"].result()
    assert address == f"127.0.0.1:{cluster.head_node.node_manager_port}"
    assert "cannot reach a Ray cluster" in _one_error(done, address)
    assert took < REFUSAL_BOUND_S and not out.exists()


def test_a_gcs_whose_raylet_is_gone_ends_within_the_connect_limit(refused: dict[str, Future[Refused]]) -> None:
    """A live GCS whose only raylet was killed: Ray would look for a node to attach to for as long as it is told
    (here 600 s, as a user's environment may say); the driver gives up after its connect limit (here 8 s, set by
    ATTNBENCH_RAY_CONNECT_LIMIT_S; CONNECT_LIMIT_S by default), exit 2, and says after how long."""
    address, done, took, out = refused["raylet_gone"].result()
    error = _one_error(done, address)
    assert "could not attach to it within 8 s" in error or "cannot reach a Ray cluster" in error, error
    assert 8 <= took < REFUSAL_BOUND_S or "cannot reach" in error
    assert not out.exists()


def test_a_gcs_that_accepts_and_never_answers_is_refused_by_the_probe(refused: dict[str, Future[Refused]]) -> None:
    """A real GCS, stopped (SIGSTOP): the kernel still accepts connections on its port, nothing answers. The HTTP/2
    probe waits for the server's SETTINGS (CONNECT_TIMEOUT_S, or the connect limit when shorter: 3 s here), then exit
    2; Ray itself would retry for minutes."""
    address, done, took, out = refused["gcs_stopped"].result()
    assert "no answer within 3 s" in _one_error(done, address)
    assert 3 <= took < REFUSAL_BOUND_S and not out.exists()


@pytest.mark.parametrize("value", ["0", "soon", "nan", "7200"])
def test_a_connect_limit_that_is_not_seconds_is_a_usage_error_naming_the_variable(
        value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.errors import UsageError
    from harness.runtime.cluster.connect import CONNECT_LIMIT_VARIABLE, connect_limit_s

    monkeypatch.setenv(CONNECT_LIMIT_VARIABLE, value)
    with pytest.raises(UsageError, match=f"{CONNECT_LIMIT_VARIABLE}='{value}' is not a number of seconds"):
        connect_limit_s()
    monkeypatch.setenv(CONNECT_LIMIT_VARIABLE, "12.5")
    assert connect_limit_s() == 12.5
    monkeypatch.delenv(CONNECT_LIMIT_VARIABLE)
    assert connect_limit_s() == CONNECT_LIMIT_S


def test_a_node_lost_mid_run_loses_no_recorded_cell(cluster: Cluster, tmp_path: Path) -> None:
    """Runs last: it removes a node. The gated case's task is retried on the other node (or recorded
    as a crash with the reason); every cell written before the loss is in the final file unchanged."""
    gated = plugin_file(tmp_path, GATED)
    out = tmp_path / "run.json"
    proc = subprocess.Popen([sys.executable, "-m", "harness", "verify", "--suite", "small", "--only", "numpy_naive,gated_numpy",
                             "--plugin", str(gated), "--executor", "ray", "--address", cluster.address, "--json", str(out)],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        pid = wait_started(tmp_path, "call", proc)
        node = _raylet_of(pid, cluster)
        lost_id = node.node_id
        before = {json.dumps(c, sort_keys=True) for c in json.loads(out.read_text())["cells"]}
        cluster.remove_node(node, allow_graceful=False)
        _wait_gone(pid)  # the node's Ray worker died with its raylet, and the call at the gate with it
        (tmp_path / "call.release").write_text("")
        stdout, stderr = proc.communicate(timeout=BOUND_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    after = json.loads(out.read_text())
    assert after["complete"], stderr
    assert before <= {json.dumps(c, sort_keys=True) for c in after["cells"]}, "a cell recorded before the loss changed"
    gated_cells = [c for c in after["cells"] if c["implementation"] == "gated_numpy"]
    # no gated call passed the gate before the node was gone: each one finished elsewhere (or is the lost crash)
    assert all((c.get("node") or {}).get("node_id") != lost_id for c in gated_cells)
    assert gated_cells and all(c["status"] == "pass" or (c["status"] == "crash" and "lost on the cluster" in c["reason"])
                               for c in gated_cells), gated_cells
    numpy_cases = {c["case_id"] for c in after["cells"] if c["implementation"] == "numpy_naive"}
    assert numpy_cases == _small_case_ids("numpy_naive") and proc.returncode in (0, 1), stderr


def _small_case_ids(name: str) -> set[str]:
    """Every case id of the small suite for a built-in: what a run that lost nothing holds."""
    from harness.contract.discovery import load_registry
    from harness.verify.suites import kernel_cases

    return {c.id for c in kernel_cases(load_registry().get(name), "small")}
