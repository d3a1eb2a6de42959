"""A confined worker's own work goes on (threads, children, signals to itself); its signals to the command are
refused. Real processes: a fork confined as a worker is, reporting what the kernel answered through a pipe."""

from __future__ import annotations

import json
import os
import sys

import pytest

from harness.runtime import confinement

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="seccomp is Linux's")


def _confined(probe) -> dict[str, str]:  # type: ignore[no-untyped-def]
    """Run ``probe(command_pid)`` in a child that leads its own session and is confined against this process."""
    command, group = os.getpid(), os.getpgrp()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child's report travels through the pipe
        os.close(read)
        answers: dict[str, str] = {}
        try:
            os.setsid()
            answers["filter"] = confinement.confine_worker((command,), (group,)) or "loaded"
            answers.update(probe(command, group))
        except BaseException as exc:  # noqa: BLE001 - whatever happened is the report
            answers["error"] = repr(exc)
        os.write(write, json.dumps(answers).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as f:
        report = json.loads(f.read() or b"{}")
    os.waitpid(pid, 0)
    return report


def _try(call) -> str:  # type: ignore[no-untyped-def]
    try:
        call()
    except OSError as exc:
        return f"refused {exc.errno}"
    return "allowed"


def _probe(command: int, group: int) -> dict[str, str]:
    import subprocess
    import threading

    child = os.fork()
    if child == 0:
        os._exit(7)
    _, status = os.waitpid(child, 0)
    ran: list[int] = []
    thread = threading.Thread(target=lambda: ran.append(1))
    thread.start()
    thread.join()
    shell = subprocess.run(["sh", "-c", f"kill -0 {command} 2>/dev/null; echo $?"], capture_output=True, text=True)
    return {
        "kill command": _try(lambda: os.kill(command, 0)),
        "killpg command": _try(lambda: os.killpg(group, 0)),
        "kill everyone": _try(lambda: os.kill(-1, 0)),
        "kill itself": _try(lambda: os.kill(os.getpid(), 0)),
        "its child": str(os.waitstatus_to_exitcode(status)),
        "thread": str(len(ran)),
        "exec'd kill": shell.stdout.strip(),
    }


def test_a_confined_worker_cannot_signal_the_command_but_runs_its_own_work() -> None:
    report = _confined(_probe)
    if report.get("filter", "").startswith("no seccomp filter"):
        pytest.skip(report["filter"])
    assert report == {"filter": "loaded", "kill command": "refused 1", "killpg command": "refused 1",
                      "kill everyone": "refused 1", "kill itself": "allowed", "its child": "7", "thread": "1",
                      "exec'd kill": "1"}, report
