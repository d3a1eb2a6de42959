"""Reading which ports listen on every interface (harness.runtime.cluster.exposure): the kernel's table format, and a
real listener on 127.0.0.1."""

from __future__ import annotations

import socket

from harness.runtime.cluster.exposure import RECIPE, exposed, exposure_warning, listening, read_tables

HEADER = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
TCP = HEADER + (
    "   0: 00000000:18EB 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 101 1\n"  # *:6379
    "   1: 0100007F:2382 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 102 1\n"  # lo:9090
    "   2: 0100007F:18EB 0100007F:D431 01 00000000:00000000 00:00000000 00000000     0        0 103 1\n"  # a connection
)
TCP6 = HEADER + (
    "   0: 00000000000000000000000000000000:4B3F 00000000000000000000000000000000:0000 0A 0:0 00:0 0 0 0 201 1\n"  # *
    "   1: 0000000000000000FFFF00000100007F:9347 00000000000000000000000000000000:0000 0A 0:0 00:0 0 0 0 202 1\n"  # lo
    "   2: 00000000000000000000000001000000:1F90 00000000000000000000000000000000:0000 0A 0:0 00:0 0 0 0 203 1\n"  # ::1
)


def test_the_tables_listeners_by_port_with_every_interface_as_star() -> None:
    table = listening([TCP, TCP6])
    assert table[6379] == {"*"} and table[9090] == {"127.0.0.1"}
    assert table[0x4B3F] == {"*"} and table[0x9347] == {"127.0.0.1"} and table[8080] == {"::1"}
    assert 0xD431 not in table  # an established connection's port is not a listener


def test_only_ports_listening_on_every_interface_are_named() -> None:
    ports = [("gcs_server", 6379), ("raylet", 0x9347), ("raylet", 0x4B3F), ("object manager", 9090)]
    assert exposed(ports, [TCP, TCP6]) == ["gcs_server *:6379", f"raylet *:{0x4B3F}"]
    said = exposure_warning("127.0.0.1:6379", ports, [TCP, TCP6])
    assert said is not None and "gcs_server *:6379" in said and RECIPE in said and "docs/cluster.md" in said
    assert exposure_warning("127.0.0.1:6379", [("raylet", 0x9347), ("object manager", 9090)], [TCP, TCP6]) is None


def test_a_real_listener_on_loopback_reads_as_loopback_only() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        assert listening(read_tables()).get(port) == {"127.0.0.1"}
        assert exposed([("probe", port)], read_tables()) == []
