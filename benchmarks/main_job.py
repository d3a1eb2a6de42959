"""The main job (`attnbench run`, no arguments) timed idle and under a load that switches on and off.

    PYTHONPATH=. python3 benchmarks/main_job.py [--runs 1] [--loaded-runs 1] [--json FILE]

Runs the main job in a fresh folder ``--runs`` times as the machine is, then ``--loaded-runs`` times beside a
process that switches a busy loop on and off at random on one core (on 50-500 ms, off 50-500 ms: the load of
benchmarks/bench_under_load.py). For each run it prints the wall time of each step (verify, bench, report: read
from when each step's output appeared), the exponents the report flags off theory
and the bench cells by status, with the load average before and after and the CPU model. The targets are the
main job within 180 s on an idle machine and 0 exponents flagged on the built-ins, idle and loaded.
Nothing here asserts anything: the figures are to report, not a test.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks.bench_under_load import BUSY_LOOP  # noqa: E402  (the checkout's harness, run as a script)
from harness.report import build_report  # noqa: E402
from harness.report.settings import ReportSettings  # noqa: E402
from harness.results import read_run  # noqa: E402
from harness.runtime.cluster.node import cpu_model  # noqa: E402


def one_run() -> dict[str, object]:
    """One `attnbench run` in a fresh folder: its steps' wall times, flagged exponents, cells. (No CPU time: the
    verify workers are the forkserver's children, which this process never reaps, so os.times misses them.)"""
    with tempfile.TemporaryDirectory(prefix="attnbench-main-job-") as folder:
        here = Path(folder)
        load = os.getloadavg()[0]
        start = time.time()
        done = subprocess.run([sys.executable, "-m", "harness", "run"], cwd=here, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
        end = time.time()
        verify = next(here.glob("results/*-verify.json"), None)
        bench = next(here.glob("results/*-bench.json"), None)
        steps = {"verify": verify.stat().st_mtime - start if verify else None,
                 "bench": bench.stat().st_mtime - verify.stat().st_mtime if bench and verify else None,
                 "report": end - bench.stat().st_mtime if bench else None}
        statuses: collections.Counter[str] = collections.Counter()
        flagged: list[str] = []
        if bench is not None:
            statuses.update(c.status.value for c in read_run(bench).bench_cells())
            report = build_report(ReportSettings((bench,), here / "check-report"))
            flagged = [f"{r.implementation} {r.quantity} in {r.axis}: {r.fit.describe() if r.fit else None}"
                       for r in report.analysis.flagged]
        return {"exit": done.returncode, "wall_s": round(end - start, 1),
                "steps_s": {k: None if v is None else round(v, 1) for k, v in steps.items()},
                "flagged": flagged, "cells": dict(statuses), "load_before": load, "load_after": os.getloadavg()[0],
                "tail": done.stdout.strip().splitlines()[-3:]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=1, help="runs as the machine is (default 1)")
    parser.add_argument("--loaded-runs", type=int, default=1, help="runs beside the busy loop (default 1)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    figures: dict[str, object] = {"cpu": cpu_model(), "as_is": [], "loaded": []}
    for _ in range(args.runs):
        figures["as_is"].append(one_run())  # type: ignore[attr-defined]
        print("as is:", json.dumps(figures["as_is"][-1]), flush=True)  # type: ignore[index]
    busy = subprocess.Popen([sys.executable, "-c", BUSY_LOOP])
    try:
        for _ in range(args.loaded_runs):
            figures["loaded"].append(one_run())  # type: ignore[attr-defined]
            print("loaded:", json.dumps(figures["loaded"][-1]), flush=True)  # type: ignore[index]
    finally:
        busy.kill()
    print(f"CPU: {figures['cpu']}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
