"""Long work shows a bar with an ETA on a terminal (a real pseudo-terminal here) and nothing of it on a pipe."""

from __future__ import annotations

import io
import os
import time

from harness.runtime.progress import Progress


def _terminal_output(work: int, labels: list[str], message: str) -> str:
    master, slave = os.openpty()
    with os.fdopen(slave, "w") as stream:
        progress = Progress(work, title="bench", stream=stream)
        assert progress.interactive
        for label in labels:
            progress.advance(label)
            time.sleep(0.15)  # past the bar's redraw interval
        progress.line(message)
        progress.close()
    out = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the terminal's other end is closed: all of it was read
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    return out.decode("utf-8", "replace")


def test_a_terminal_gets_a_bar_with_its_count_eta_and_label_and_the_lasting_lines() -> None:
    out = _terminal_output(4, ["cell one", "cell two"], "a lasting line")
    assert "bench" in out and "2/4" in out and "ETA 00:0" in out and "cell two" in out, out
    assert "a lasting line\r\n" in out  # printed above the bar, and kept
    assert out.rstrip(" ").endswith("\r")  # the bar cleared itself at the end: the prompt comes back clean


def test_a_pipe_gets_only_the_lasting_lines_and_a_quiet_run_nothing() -> None:
    pipe = io.StringIO()
    with Progress(3, title="verify", stream=pipe) as progress:
        for label in ("a", "b", "c", "past the end"):
            progress.advance(label)
        progress.line("3 problems")
        assert progress.done == 3  # counted, never past the total
    assert pipe.getvalue() == "3 problems\n"
    quiet = io.StringIO()
    with Progress(3, stream=quiet, enabled=False) as progress:
        progress.advance("a")
        progress.line("not shown")
    assert quiet.getvalue() == ""
