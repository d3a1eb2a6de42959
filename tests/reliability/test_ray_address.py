"""`--executor ray --address` where nothing listens: a bounded connect and one line, not a wait until killed."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # subprocesses and workers that import torch: not in the inner loop

BOUND_S = 120.0
"""Only so a broken test ends: the connect itself gives up far sooner (nothing answers on loopback port 1)."""


@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="needs Ray (pip install 'attnbench[ray]')")
@pytest.mark.parametrize("command", ["verify", "bench"])
def test_an_address_where_nothing_listens_is_one_line_and_exit_2(tmp_path: Path, command: str, attnbench) -> None:
    out = tmp_path / "r.json"
    where = ["--json", str(out)] if command == "verify" else ["--out", str(out), "--T", "16", "--quiet"]
    done = attnbench(command, "--executor", "ray", "--address", "127.0.0.1:1", "--only", "numpy_naive", *where,
                     timeout=BOUND_S)
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and "127.0.0.1:1" in errors[0], done.stderr
    assert "Traceback" not in done.stderr
    assert not out.exists()


@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="needs Ray (pip install 'attnbench[ray]')")
def test_an_address_where_something_else_listens_is_refused_at_once(tmp_path: Path, attnbench) -> None:
    """A dashboard (HTTP) where the cluster's GCS (gRPC) should be: Ray would retry it until killed."""
    import http.server
    import threading

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    address = f"127.0.0.1:{server.server_address[1]}"
    out = tmp_path / "r.json"
    try:
        done = attnbench("verify", "--executor", "ray", "--address", address, "--only", "numpy_naive", "--json", str(out),
                         timeout=BOUND_S)
    finally:
        server.shutdown()
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and address in errors[0] and "not a Ray cluster" in errors[0], done.stderr
    assert not out.exists()


@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="needs Ray (pip install 'attnbench[ray]')")
def test_an_address_that_accepts_and_never_answers_is_refused_within_the_connect_limit(tmp_path: Path,
                                                                                       attnbench) -> None:
    """A server that accepts the connection and then says nothing (a hung GCS, a stopped process whose socket the
    kernel still accepts on): the probe waits CONNECT_TIMEOUT_S for an answer, never longer, and never longer than a
    shorter connect limit (here 2 s, as a CI job that checks a dead cluster may set it)."""
    import socket
    import threading
    import time

    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept_and_stay_silent() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                continue

    threading.Thread(target=accept_and_stay_silent, daemon=True).start()
    address = f"127.0.0.1:{listener.getsockname()[1]}"
    started = time.monotonic()
    try:
        done = attnbench("verify", "--executor", "ray", "--address", address, "--only", "numpy_naive", "--json",
                         str(tmp_path / "r.json"), env={"ATTNBENCH_RAY_CONNECT_LIMIT_S": "2"}, timeout=BOUND_S)
    finally:
        stop.set()
        listener.close()
        for sock in held:
            sock.close()
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and address in errors[0] and "no answer within 2 s" in errors[0]
    assert held, "the command never connected"
    assert time.monotonic() - started >= 2  # it waited for the answer, and then gave up
    assert not (tmp_path / "r.json").exists()


@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="needs Ray (pip install 'attnbench[ray]')")
def test_a_ray_address_variable_where_nothing_listens_is_checked_as_the_flag_is(tmp_path: Path, attnbench) -> None:
    """RAY_ADDRESS is the address Ray uses when --address is not given: the same pre-check, not a minute's wait."""
    out = tmp_path / "r.json"
    done = attnbench("verify", "--executor", "ray", "--only", "numpy_naive", "--json", str(out),
                     env={"RAY_ADDRESS": "127.0.0.1:1"}, timeout=BOUND_S)
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and "127.0.0.1:1" in errors[0] and "RAY_ADDRESS" in errors[0], done.stderr
    assert not out.exists()
