"""The report renders in a real browser: headless Chromium opens index.html, every image loads, no console error.

Chromium is driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``: commands
on fd 3, answers on fd 4, JSON messages ended by NUL), so no WebDriver, no websocket library
and no network port are needed. Debian's ``chromium`` package is installed by
``scripts/setup.sh test``; without it the browser test skips and says so, while the
parser-level checks in tests/test_report.py always run.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from test_report_data import write_bench_run, write_verify_run

from harness.cli import main

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--remote-debugging-pipe")
IMAGES_JS = "Array.from(document.images).map(i => [i.complete, i.naturalWidth, i.naturalHeight])"

needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (Debian: apt-get install -y "
                                    "chromium; scripts/setup.sh test does it); the parser-level test still runs")


class Browser:
    """Just enough of the DevTools protocol: open a page, gather console errors, evaluate JS."""

    def __init__(self, profile: Path, timeout: float = 60.0) -> None:
        self.timeout = timeout
        to_child, self._write = os.pipe()
        self._read, from_child = os.pipe()

        self.log = profile.parent / "chromium.log"  # a file, not a pipe: a full pipe would stall chromium
        # a tiny exec wrapper hands our pipe ends to chromium as fd 3 (commands) and fd 4 (answers)
        wiring = "import os, sys; os.dup2(int(sys.argv[1]), 3); os.dup2(int(sys.argv[2]), 4); os.execv(sys.argv[3], sys.argv[3:])"
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen([sys.executable, "-c", wiring, str(to_child), str(from_child), CHROMIUM, *FLAGS,
                                          f"--user-data-dir={profile}", "about:blank"],
                                         stdout=subprocess.DEVNULL, stderr=log, pass_fds=(to_child, from_child))
        os.close(to_child)
        os.close(from_child)
        self._buffer = b""
        self._id = 0
        self.events: list[dict[str, Any]] = []

    def _message(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._read], [], [], left)[0]:
                raise TimeoutError("chromium did not answer in time")
            chunk = os.read(self._read, 1 << 20)
            if not chunk:
                raise RuntimeError(f"chromium exited: {self.log.read_text(errors='replace')[-2000:]}")
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(raw)

    def send(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> dict[str, Any]:
        self._id += 1
        message: dict[str, Any] = {"id": self._id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._write, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        while True:
            answer = self._message(deadline)
            if answer.get("id") == self._id:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                return answer.get("result", {})
            self.events.append(answer)

    def wait_for(self, method: str) -> None:
        deadline = time.monotonic() + self.timeout
        while not any(e.get("method") == method for e in self.events):
            self.events.append(self._message(deadline))

    def open(self, url: str) -> str:
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Runtime", "Log", "Page"):
            self.send(f"{domain}.enable", session=session)
        self.events.clear()
        self.send("Page.navigate", {"url": url}, session=session)
        self.wait_for("Page.loadEventFired")
        return session

    def evaluate(self, expression: str, session: str) -> Any:
        result = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True}, session=session)
        return result["result"].get("value")

    def console_errors(self) -> list[str]:
        errors = []
        for event in self.events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                errors.append(" ".join(str(a.get("value", a.get("description"))) for a in params.get("args", [])))
            elif method == "Runtime.exceptionThrown":
                errors.append(str(params.get("exceptionDetails", {}).get("text")))
            elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
                errors.append(f"{params['entry'].get('source')}: {params['entry'].get('text')} {params['entry'].get('url', '')}")
        return errors

    def close(self) -> None:
        try:
            self.send("Browser.close")
        except (RuntimeError, TimeoutError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._write)
        os.close(self._read)


@pytest.fixture
def browser(tmp_path: Path):  # type: ignore[no-untyped-def]
    b = Browser(tmp_path / "profile")
    yield b
    b.close()


@needs_chromium
def test_report_renders_in_chromium_images_load_and_no_console_errors(tmp_path: Path, browser: Browser) -> None:
    verify = write_verify_run(tmp_path / "verify.json", broken="<script>console.error('x')</script>")
    bench = write_bench_run(tmp_path / "bench.json")
    out = tmp_path / "report"
    assert main(["report", str(verify), str(bench), "--out", str(out)]) == 0
    session = browser.open((out / "index.html").resolve().as_uri())
    images = browser.evaluate(IMAGES_JS, session)
    assert len(images) == 7
    assert all(complete and width > 300 and height > 200 for complete, width, height in images), images
    assert browser.console_errors() == []
    assert browser.evaluate("document.title", session).startswith("attnbench report")
    text = browser.evaluate("document.body.innerText", session)
    assert "<script>console.error('x')</script>" in text  # shown as text, never run


@needs_chromium
def test_the_browser_check_catches_a_broken_image_and_a_console_error(tmp_path: Path, browser: Browser) -> None:
    page = tmp_path / "broken.html"
    page.write_text('<!DOCTYPE html><html><body><img src="missing.png">'
                    "<script>console.error('boom')</script></body></html>")
    session = browser.open(page.as_uri())
    assert browser.evaluate(IMAGES_JS, session) == [[True, 0, 0]]
    errors = browser.console_errors()
    assert any("boom" in e for e in errors) and any("missing.png" in e for e in errors), errors
