"""Plugins that stop at a gate the test controls, so a signal lands exactly where a test wants it.

A gate is a pair of files in a directory: the plugin writes ``NAME.started`` (its pid inside)
when it reaches the gate, then waits for ``NAME.release``. The test waits for ``started``,
does what it tests (a SIGINT, a SIGKILL, a second run), then writes ``release``. Nothing
races a timer: every wait has a generous bound only so a broken test ends instead of hanging.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

BOUND_S = 240.0
"""The longest any side waits for the other: a bound for a broken test, never a timing assumption."""

GATE_CODE = '''
import os, pathlib, time

GATES = pathlib.Path({gates!r})


def gate(name):
    """Say this process reached NAME, then wait for the test to release it."""
    (GATES / (name + ".started")).write_text(str(os.getpid()))
    deadline = time.monotonic() + {bound}
    while not (GATES / (name + ".release")).exists():
        if time.monotonic() > deadline:
            raise TimeoutError("gate " + name + " was never released")
        time.sleep(0.02)
'''


def plugin_file(directory: Path, body: str, name: str = "gated_plugin.py") -> Path:
    """A plugin file whose code may call ``gate(name)``; its gates live in ``directory``."""
    path = directory / name
    path.write_text(GATE_CODE.format(gates=str(directory), bound=BOUND_S) + body)
    return path


def wait_started(directory: Path, name: str, proc: subprocess.Popen[str]) -> int:
    """Wait until the plugin reached gate ``name``; return the pid of the process that did."""
    marker = directory / f"{name}.started"
    deadline = time.monotonic() + BOUND_S
    while not marker.exists():
        if proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(f"the run ended (exit {proc.returncode}) before gate {name}:\n{out}\n{err}")
        if time.monotonic() > deadline:
            raise AssertionError(f"gate {name} not reached within {BOUND_S:g} s")
        time.sleep(0.02)
    deadline = time.monotonic() + 10
    while not marker.read_text() and time.monotonic() < deadline:  # written, but maybe not flushed yet
        time.sleep(0.01)
    return int(marker.read_text())


def release(directory: Path, name: str) -> None:
    (directory / f"{name}.release").write_text("go")


def finish(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=BOUND_S)
    return proc.returncode, out, err


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie has exited: it only waits for its parent to read its status
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True
