"""The driver's side of a Ray cluster: import Ray when asked, connect, ship the code, count the slots.

Ray is imported only here and only when ``--executor ray`` is given (``attnbench --help`` never
loads it). What the workers import comes with every task's runtime environment, so a node needs
attnbench's dependencies (torch, NumPy, ...) but not attnbench itself:

- ``py_modules``: the ``harness`` and ``implementations`` packages this driver runs, wherever they
  are installed (a checkout, an editable install, site-packages);
- ``working_dir``: a directory holding a copy of each ``--plugin`` file (``plugins/<n>/<name>.py``);
  workers start there, so a file plugin given as an absolute path on the driver is loaded from its
  copy on every node. Module plugins (``--plugin my_pkg.attn``) must be importable on the nodes.
"""

from __future__ import annotations

import atexit
import importlib.util
import logging
import math
import os
import shutil
import socket
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import UsageError

NODE_RESOURCE = "attnbench_node"
"""The whole-node custom resource: each node started with ``--resources '{"attnbench_node": 1}'``;
a CPU timing cell takes all of it, so no two timing cells ever share a node."""
CONNECT_TIMEOUT_S = 10.0
"""How long the driver waits for the cluster's address to accept a TCP connection and answer as a gRPC server before
it gives up; never longer than the connect limit (:func:`connect_limit_s`), which bounds the whole connection."""
CONNECT_LIMIT_S = 45.0
"""The most the whole connection may take once the address answered as a gRPC server (``ray.init``: the GCS's
cluster id, a live node to attach to). Ray's own retries are cut below it (:data:`RAY_LIMITS`), so Ray's own
error usually comes first; this bound holds whatever Ray does. ``ATTNBENCH_RAY_CONNECT_LIMIT_S`` sets another
(:func:`connect_limit_s`): a cluster that is slow to admit a driver needs more, a CI job that checks a dead one less."""
CONNECT_LIMIT_VARIABLE = "ATTNBENCH_RAY_CONNECT_LIMIT_S"
RAY_LIMITS = {"RAY_gcs_server_port_wait_time_s": "10", "RAY_gcs_server_request_timeout_seconds": "20"}
"""Ray's own waits, read when ray is imported: attempts at the GCS's cluster id (about 1 s each; default 20) and
the seconds it looks for a live node to attach the driver to (default 60; a GCS whose raylet is gone)."""
INSTALL_HINT = "pip install 'attnbench[ray]'  (or pip install 'ray>=2.40')"


def require_ray() -> None:
    """A UsageError (exit 2) that says how to install Ray, when it is not installed. Imports nothing."""
    if importlib.util.find_spec("ray") is None:
        raise UsageError(f"--executor ray needs Ray, which is not installed here; install it with: {INSTALL_HINT}")


def _is_loopback(address: str | None) -> bool:
    host = (address or "").rsplit(":", 1)[0].strip("[]")
    return host in ("127.0.0.1", "localhost", "::1")


def _import_ray(address: str | None) -> Any:
    require_ray()
    if _is_loopback(address) and "ray" not in sys.modules:
        # Ray replaces a loopback address by the machine's outward IP before connecting, which fails
        # for a cluster bound to 127.0.0.1 (a test cluster on one machine). Its own switch for
        # single-machine clusters keeps the driver on loopback; read when ray is imported.
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    if "ray" not in sys.modules:
        for name, value in RAY_LIMITS.items():
            os.environ.setdefault(name, value)
    import ray

    return ray


def _start_hint() -> str:
    return f"start one with `ray start --head --resources '{{\"{NODE_RESOURCE}\": 1}}'` or pass --address HOST:PORT"


def cluster_address(address: str | None) -> tuple[str | None, str]:
    """The address Ray will use, and where it came from: ``--address``, else ``RAY_ADDRESS`` (which Ray itself
    reads when given none), else None (the cluster ``ray start`` made on this machine)."""
    if address:
        return address, "--address"
    from_env = os.environ.get("RAY_ADDRESS", "").strip()
    return (from_env, "RAY_ADDRESS") if from_env else (None, "--address")


def check_reachable(address: str | None, timeout: float = CONNECT_TIMEOUT_S, named_by: str = "--address") -> None:
    """A UsageError unless something accepts a TCP connection at ``address`` (HOST:PORT, or ray://HOST:PORT)
    within ``timeout``. Ray itself retries an address where nothing listens until it is killed.
    ``named_by``: where the address came from, for the message (``--address`` or ``RAY_ADDRESS``)."""
    if not address or address == "auto":
        return  # Ray finds the local cluster's address itself, and says at once when there is none
    host, _, port = address.split("://", 1)[-1].rpartition(":")
    if not host or not port.isdigit():
        raise UsageError(f"{named_by} {address!r}: give HOST:PORT, e.g. 127.0.0.1:6379")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout) as sock:
            sock.settimeout(timeout)
            answer = _speaks_grpc(sock)
    except OSError as exc:
        why = f"no answer within {timeout:g} s" if isinstance(exc, TimeoutError) else (exc.strerror or str(exc))
        raise UsageError(f"cannot reach a Ray cluster at {address} (from {named_by}; {why}); {_start_hint()}") from None
    if answer is not None:
        raise UsageError(f"something listens at {address}, but it is not a Ray cluster ({answer}); give the address "
                         "of the head's GCS (HOST:6379 by default, as `ray start --head` prints it; not the "
                         "dashboard's port 8265)")


HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
"""An HTTP/2 client's connection preface and an empty SETTINGS frame: what a gRPC client sends first."""


def _speaks_grpc(sock: socket.socket) -> str | None:
    """None when the peer answers as an HTTP/2 (gRPC) server does, a SETTINGS frame on stream 0, as Ray's GCS
    and its client server do; else what it did instead. Ray retries a peer that speaks anything else for ever."""
    sock.sendall(HTTP2_PREFACE)
    head = b""
    while len(head) < 9:
        chunk = sock.recv(9 - len(head))
        if not chunk:
            return "it closed the connection without an HTTP/2 answer"
        head += chunk
    if head[3] != 0x04 or int.from_bytes(head[5:9], "big") & 0x7FFFFFFF != 0:
        shown = head.decode("ascii", errors="replace").split("\r")[0].strip()
        return f"it answered {shown!r}, not an HTTP/2 SETTINGS frame"
    return None


def _package_dir(name: str) -> str:
    module = importlib.import_module(name)
    return str(Path(module.__file__ or "").resolve().parent)


def stage_plugins(plugins: tuple[str, ...], into: Path) -> tuple[str, ...]:
    """Copy each plugin *file* into ``into``; return the specs the workers use (relative to their
    working directory, which is ``into``'s copy). Module names stay as they are."""
    remote: list[str] = []
    for index, spec in enumerate(plugins):
        path = Path(spec)
        if spec.endswith(".py") and path.is_file():
            target = into / "plugins" / str(index) / path.name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
            remote.append(str(target.relative_to(into)))
        else:
            remote.append(spec)
    return tuple(remote)


@dataclass
class RayCluster:
    """A connected driver: the ``ray`` module, the plugin specs as the workers see them, the slots."""

    ray: Any
    address: str | None
    plugins: tuple[str, ...]
    """The ``--plugin`` specs for tasks: file plugins as their staged copies."""
    staged: dict[str, str] = field(default_factory=dict)
    """A plugin file's path on this driver -> the path of its copy as the workers see it."""

    def remote_source(self, source: str) -> str:
        """An implementation's source spec (:attr:`harness.contract.discovery.Registry.sources`) as a node loads it."""
        return self.staged.get(source, source)

    def resources(self) -> dict[str, float]:
        return dict(self.ray.cluster_resources())

    def timing_slots(self, device: str) -> int:
        """How many timing cells can run at once: nodes with the node resource (CPU), or GPUs (CUDA)."""
        key = "GPU" if device == "cuda" else NODE_RESOURCE
        slots = int(self.resources().get(key, 0))
        if slots < 1:
            fix = ("start GPU nodes" if device == "cuda" else
                   f"start every node with --resources '{{\"{NODE_RESOURCE}\": 1}}'")
            raise UsageError(f"the Ray cluster at {self.address or 'auto'} has no {key} resource, so no timing cell "
                             f"could ever be placed; {fix}")
        return slots

    def cpus(self) -> int:
        return max(1, int(self.resources().get("CPU", 1)))

    def nodes(self) -> list[dict[str, Any]]:
        return [n for n in self.ray.nodes() if n.get("Alive")]


@contextmanager
def connect(address: str | None, plugins: tuple[str, ...]) -> Iterator[RayCluster]:
    """Connect to the cluster at ``address`` (None or "auto": the one ``ray start`` made here),
    with attnbench and the plugin files in the runtime environment; disconnect afterwards."""
    address, named_by = cluster_address(address)  # RAY_ADDRESS is checked as --address is, not waited on for a minute
    check_reachable(address, min(CONNECT_TIMEOUT_S, connect_limit_s()), named_by=named_by)
    ray = _import_ray(address)
    staging = Path(tempfile.mkdtemp(prefix="attnbench-ray-"))
    try:
        remote = stage_plugins(plugins, staging)
        runtime_env = {"working_dir": str(staging), "py_modules": [_package_dir("harness"), _package_dir("implementations")],
                       "excludes": ["__pycache__", "*.pyc"]}
        loopback = {"_node_ip_address": "127.0.0.1"} if _is_loopback(address) else {}  # the driver registers on lo
        _bounded_init(ray, connect_limit_s(), address=address or "auto", runtime_env=runtime_env, log_to_driver=False,
                      logging_level="warning", configure_logging=True, **loopback)
        try:
            _warn_if_exposed(ray)
            yield RayCluster(ray, address, remote, dict(zip(plugins, remote)))
        finally:
            ray.shutdown()
    finally:
        shutil.rmtree(staging, ignore_errors=True)


class _NotMainThread(logging.Filter):
    """Drops Ray's note that it set no SIGTERM handler (ray.init runs in a thread here): SIGTERM stays attnbench's."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "SIGTERM handler is not set" not in record.getMessage()


def connect_limit_s() -> float:
    """The bound on ``ray.init``: :data:`CONNECT_LIMIT_S`, or the seconds ``ATTNBENCH_RAY_CONNECT_LIMIT_S`` gives
    (a usage error, exit 2, naming the variable when it is not a number of seconds from 1 to 3600)."""
    text = os.environ.get(CONNECT_LIMIT_VARIABLE, "").strip()
    if not text:
        return CONNECT_LIMIT_S
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not 1.0 <= seconds <= 3600.0:  # NaN fails too
        raise UsageError(f"{CONNECT_LIMIT_VARIABLE}={text!r} is not a number of seconds from 1 to 3600; "
                         f"unset it for the default {CONNECT_LIMIT_S:g} s")
    return seconds


def _bounded_init(ray: Any, limit_s: float, **kwargs: Any) -> None:
    """``ray.init(**kwargs)`` given at most ``limit_s``, else a UsageError: run in a daemon thread, so a cluster that
    answers but never lets the driver attach (a GCS whose raylet is gone, a gRPC server that is not a GCS) ends
    the command with exit 2 instead of holding it. In a thread, ray.init also leaves the command's own SIGTERM
    handler in place (in the main thread it installs one that exits at once)."""
    logging.getLogger("ray._private.worker").addFilter(_NotMainThread())
    failure: list[BaseException] = []

    def init() -> None:
        try:
            ray.init(**kwargs)
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread as it is
            failure.append(exc)

    thread = threading.Thread(target=init, name="ray.init", daemon=True)
    thread.start()
    thread.join(limit_s)
    where = kwargs.get("address") or "auto"
    if thread.is_alive():
        atexit.unregister(ray.shutdown)  # Ray's exit hook would wait on the connection that hangs
        raise UsageError(f"the Ray cluster at {where} answered but the driver could not attach to it within "
                         f"{limit_s:g} s (a GCS whose raylet is gone, or a gRPC server that is not Ray's GCS); "
                         f"check it with `ray status --address {where}`, or {_start_hint()}")
    if failure:
        exc = failure[0]
        if isinstance(exc, (ConnectionError, TimeoutError, RuntimeError)):
            said = str(exc.__cause__ or "").split("Traceback")[0].split("Last connection error")[0]
            cause = said.strip().splitlines()[0].strip(" .:")[:200] if said.strip() else ""  # Ray's reason, if chained
            why = f"{exc} ({cause})" if cause else str(exc)
            raise UsageError(f"cannot reach a Ray cluster at {where}: {why}; {_start_hint()}") from None
        raise exc


def _cluster_ports(ray: Any, address: str) -> list[tuple[str, int]]:
    """The GCS's port and every live node's raylet and object manager ports, each with its process's name. Called for
    a GCS on loopback: its nodes are all on this machine (one elsewhere could not reach it)."""
    ports = [("gcs_server", int(address.rsplit(":", 1)[1]))]
    for node in ray.nodes():
        if not node.get("Alive"):
            continue
        for key, name in (("NodeManagerPort", "raylet"), ("ObjectManagerPort", "object manager")):
            port = node.get(key)
            if isinstance(port, int) and port > 0:
                ports.append((name, port))
    return ports


def _warn_if_exposed(ray: Any) -> None:
    """A warning on stderr when the cluster's GCS is on loopback (a cluster for this machine alone: an ``--address``
    on 127.0.0.1, or the one ``ray start`` made here) but some of its ports listen on every interface
    (:mod:`harness.runtime.cluster.exposure`)."""
    from harness.runtime.cluster.exposure import exposure_warning

    try:
        address = str(ray.get_runtime_context().gcs_address)
        if not _is_loopback(address):
            return
        ports = _cluster_ports(ray, address)
    except (ValueError, IndexError, AttributeError):
        return
    said = exposure_warning(address, ports)
    if said:
        print(f"attnbench: warning: {said}", file=sys.stderr)
