"""Which of a single-machine Ray cluster's ports listen on every interface, not only on loopback.

A cluster meant for this machine alone (an ``--address`` on 127.0.0.1) runs whatever code it is sent:
reachable from the network, it is a remote code execution service. Ray binds its gRPC servers
(``gcs_server``, ``raylet``, the workers') to 127.0.0.1 only when the node's IP is loopback, and
``ray start --node-ip-address 127.0.0.1`` replaces a loopback IP by the machine's outward one unless
``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` is set (docs/cluster.md): then it listens on ``*:PORT``. The
driver cannot rebind another process's socket, so it reads the kernel's table of listening sockets
(``/proc/net/tcp`` and ``tcp6``, any process's, no privilege needed) for the cluster's ports and says
which listen on every interface.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from pathlib import Path

TABLES = ("/proc/net/tcp", "/proc/net/tcp6")
LISTEN = "0A"
"""A socket's state in the tables' ``st`` column when it listens."""
RECIPE = ("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 ray start --head --node-ip-address 127.0.0.1 "
          "--include-dashboard false --resources '{\"attnbench_node\": 1}'")


def _address(hex_address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """A table's local address (hex, each 32-bit word in the host's byte order: little-endian on Linux's hosts)."""
    raw = bytes.fromhex(hex_address)
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    return ipaddress.ip_address(words)


def listening(tables: Iterable[str]) -> dict[int, set[str]]:
    """Port -> the local addresses that listen on it, from the text of ``/proc/net/tcp``-format tables:
    ``"*"`` for every interface (0.0.0.0 or ::), else the address."""
    found: dict[int, set[str]] = {}
    for table in tables:
        for line in table.splitlines()[1:]:
            fields = line.split()
            if len(fields) < 4 or fields[3] != LISTEN or ":" not in fields[1]:
                continue
            host, _, port = fields[1].partition(":")
            try:
                ip, number = _address(host), int(port, 16)
            except ValueError:
                continue
            mapped = getattr(ip, "ipv4_mapped", None)
            shown = "*" if ip.is_unspecified else str(mapped or ip)
            found.setdefault(number, set()).add(shown)
    return found


def read_tables() -> list[str]:
    """This network namespace's TCP tables (empty where /proc has none: not Linux)."""
    texts = []
    for path in TABLES:
        try:
            texts.append(Path(path).read_text())
        except OSError:
            continue
    return texts


def exposed(ports: Iterable[tuple[str, int]], tables: Iterable[str]) -> list[str]:
    """``name *:PORT`` for each (name, port) that listens on every interface, in the order given."""
    table = listening(tables)
    return [f"{name} *:{port}" for name, port in ports if "*" in table.get(port, set())]


def exposure_warning(address: str, ports: Iterable[tuple[str, int]], tables: Iterable[str] | None = None) -> str | None:
    """A sentence when the cluster at loopback ``address`` has ports listening on every interface, else None."""
    wide = exposed(ports, read_tables() if tables is None else tables)
    if not wide:
        return None
    return (f"the Ray cluster at {address} listens on every interface, not only on 127.0.0.1 ({', '.join(wide)}): "
            "whoever reaches this machine can run code on it; start it on loopback with "
            f"`{RECIPE}` (docs/cluster.md, 'Keeping a single-machine cluster on 127.0.0.1')")
