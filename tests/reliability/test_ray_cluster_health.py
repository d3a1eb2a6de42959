"""A real Ray cluster on 127.0.0.1 that answers but is not healthy: the driver's connection is bounded, exit 2.

Each cluster here is ``ray.cluster_utils.Cluster`` started by the test and shut down by it (only its own
processes are ever stopped); every server listens on 127.0.0.1 only.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # loopback nodes stay on loopback (read at import)
ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'attnbench[ray]')")

from ray.cluster_utils import Cluster  # noqa: E402

from harness.runtime.cluster.connect import CONNECT_LIMIT_S  # noqa: E402
from harness.runtime.cluster.exposure import listening, read_tables  # noqa: E402

pytestmark = [pytest.mark.timeout(420), pytest.mark.slow]
BOUND_S = CONNECT_LIMIT_S + 90.0
"""The connect limit, plus the command's own start (torch, Ray imported) on a busy machine."""


def _cluster() -> Cluster:
    return Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False,
                                                         "node_ip_address": "127.0.0.1"})


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    c = _cluster()
    try:
        yield c
    finally:
        c.shutdown()


def _verify(attnbench: Any, address: str, out: Path, **env: str) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    done = attnbench("verify", "--executor", "ray", "--address", address, "--only", "numpy_naive", "--json", str(out),
                     env=env, timeout=BOUND_S)
    return done, time.monotonic() - started


def _one_error(done: subprocess.CompletedProcess[str], address: str) -> str:
    assert done.returncode == 2, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("attnbench") and "error:" in line]
    assert len(errors) == 1 and address in errors[0] and "Traceback" not in done.stderr, done.stderr[-3000:]
    return errors[0]


def test_a_grpc_server_that_is_not_the_gcs_is_refused_in_bounded_time(cluster: Cluster, tmp_path: Path,
                                                                        attnbench: Any) -> None:
    """The head's raylet port answers HTTP/2 as the GCS does, but is not it: Ray's own attempts at the cluster id
    are cut (harness.runtime.cluster.connect.RAY_LIMITS), so its error comes, as exit 2, well within the connect limit."""
    address = f"127.0.0.1:{cluster.head_node.node_manager_port}"
    done, took = _verify(attnbench, address, tmp_path / "r.json")
    assert "cannot reach a Ray cluster" in _one_error(done, address)
    assert took < BOUND_S and not (tmp_path / "r.json").exists()


def test_a_gcs_whose_raylet_is_gone_ends_within_the_connect_limit(tmp_path: Path, attnbench: Any) -> None:
    """A live GCS whose only raylet was killed: Ray would look for a node to attach to for as long as it is told
    (here 600 s, as a user's environment may say); the driver gives up after its connect limit (here 8 s, set by
    ATTNBENCH_RAY_CONNECT_LIMIT_S; CONNECT_LIMIT_S by default), exit 2, and says after how long."""
    c = _cluster()
    address = c.address
    try:
        raylet = c.head_node.all_processes["raylet"][0].process
        raylet.kill()  # this test's own cluster's raylet, nothing else
        raylet.wait(timeout=30)
        done, took = _verify(attnbench, address, tmp_path / "r.json", RAY_gcs_server_request_timeout_seconds="600",
                             ATTNBENCH_RAY_CONNECT_LIMIT_S="8")
    finally:
        c.shutdown()
    error = _one_error(done, address)
    assert "could not attach to it within 8 s" in error or "cannot reach a Ray cluster" in error, error
    assert 8 <= took < BOUND_S or "cannot reach" in error
    assert not (tmp_path / "r.json").exists()


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
    import signal

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


def test_a_gcs_that_accepts_and_never_answers_is_refused_by_the_probe(tmp_path: Path, attnbench: Any) -> None:
    """A real GCS, stopped (SIGSTOP): the kernel still accepts connections on its port, nothing answers. The HTTP/2
    probe waits for the server's SETTINGS (CONNECT_TIMEOUT_S, or the connect limit when shorter: 3 s here), then exit
    2; Ray itself would retry for minutes."""
    import signal

    c = _cluster()
    address = c.address
    gcs = c.head_node.all_processes["gcs_server"][0].process
    try:
        os.kill(gcs.pid, signal.SIGSTOP)  # this test's own cluster's GCS
        done, took = _verify(attnbench, address, tmp_path / "r.json", ATTNBENCH_RAY_CONNECT_LIMIT_S="3")
    finally:
        os.kill(gcs.pid, signal.SIGCONT)
        c.shutdown()
    assert "no answer within 3 s" in _one_error(done, address)
    assert 3 <= took < BOUND_S and not (tmp_path / "r.json").exists()


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
