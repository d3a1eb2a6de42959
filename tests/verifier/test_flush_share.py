"""verify's result file is rewritten whole; a rewrite that costs much waits longer before the next unforced one."""

from __future__ import annotations

import time
from pathlib import Path

from harness.results import ResultWriter
from harness.verify.runner import FLUSH_SHARE, VerifyRun


def _run(tmp_path: Path) -> tuple[VerifyRun, ResultWriter]:
    writer = ResultWriter(tmp_path / "run.json", "verify", {"suite": "quick"})
    return VerifyRun(impls=[], sources={}, suite="quick", trials=1, timeout=1.0, writer=writer, flush_every_s=0.0), writer


def test_an_unforced_rewrite_waits_its_cost_over_the_share(tmp_path: Path) -> None:
    run, writer = _run(tmp_path)
    run._flush()  # the first write: nothing written yet, no cost known
    assert (tmp_path / "run.json").exists()
    run._flush_cpu_s = 3600.0 * FLUSH_SHARE  # a write that took that long waits an hour for the next
    before = (tmp_path / "run.json").stat().st_mtime_ns
    time.sleep(0.01)
    run._flush()
    assert (tmp_path / "run.json").stat().st_mtime_ns == before
    run._flush(force=True)  # a crash, a timeout, the end of the run: written now
    assert (tmp_path / "run.json").stat().st_mtime_ns != before
    writer.close()
