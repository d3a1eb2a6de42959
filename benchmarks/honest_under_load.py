"""Is an honest kernel ever flagged? ``attnbench bench`` on the honest set, idle and beside busy loops.

    PYTHONPATH=. python3 benchmarks/honest_under_load.py [--loops 0,2,8] [--runs 2] [--T 256,1024] [--heads 2]
        [--d 64] [--clock auto|cpu|wall] [--json FILE]

The honest set: torch_sdpa, tiled_fused and the honest-but-unusual plugins of
``tests/integrity/redteam/honest.py`` (a layout made in set-up, a reused workspace, a joined pool, a pool that
spins between calls, a first-call autotuner, a lazy first call, plain NumPy, an idle pool). For each number of
busy loops (``sh``-free Python loops, each a whole core, unpinned) it runs ``--runs`` bench runs and counts the
cells that are not ``ok`` (implausible, violation, wrong: none is expected) with their reasons, and prints the
load average before and after, and the CPU. Nothing here asserts anything: the figures are to report.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from harness.runtime.cluster.node import cpu_model

HONEST = Path(__file__).resolve().parents[1] / "tests" / "integrity" / "redteam" / "honest.py"
BUSY = "while True:\n    pass\n"


def one_run(args: argparse.Namespace, out: Path) -> list[dict[str, str]]:
    """One bench of the honest set: every cell's implementation, case and status (and reason when flagged)."""
    command = [sys.executable, "-m", "harness", "bench", "--plugin", str(HONEST), "--only", args.only,
               "--T", args.T, "--heads", str(args.heads), "--d", str(args.d), "--mode", "fwd", "--no-memory",
               "--clock", args.clock, "--quiet", "--out", str(out)]
    subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=1800)
    cells = json.loads(out.read_text())["cells"]
    return [{"implementation": c["implementation"], "case": c["case_id"], "status": c["status"],
             "reason": (c.get("reason") or "")[:300]} for c in cells]


def condition(args: argparse.Namespace, loops: int, folder: Path) -> dict[str, object]:
    busy = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(loops)]
    try:
        before = os.getloadavg()[0]
        runs = [one_run(args, folder / f"loops{loops}-{i}.json") for i in range(args.runs)]
        after = os.getloadavg()[0]
    finally:
        for p in busy:
            p.kill()
            p.wait()
    cells = [c for run in runs for c in run]
    flagged = [c for c in cells if c["status"] != "ok"]
    return {"loops": loops, "load_before": before, "load_after": after, "cells": len(cells), "flagged": flagged}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--loops", default="0,2,8", help="busy loops per condition, comma-separated")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--only", default="torch_sdpa,tiled_fused,ok_prepared_layout,ok_workspace,ok_joined_pool,"
                                          "ok_spinning_pool,ok_autotune,ok_lazy_init,ok_numpy,ok_idle_pool")
    parser.add_argument("--T", default="256,1024")
    parser.add_argument("--heads", type=int, default=2)
    parser.add_argument("--d", type=int, default=64)
    parser.add_argument("--clock", default="auto", choices=("auto", "cpu", "wall"))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    print(f"CPU: {cpu_model()}, {os.cpu_count()} logical CPUs; bench --clock {args.clock}, T {args.T}, "
          f"heads {args.heads}, d {args.d}, {args.runs} runs a condition")
    results = []
    with tempfile.TemporaryDirectory() as folder:
        for loops in (int(x) for x in args.loops.split(",")):
            result = condition(args, loops, Path(folder))
            results.append(result)
            flagged = result["flagged"]
            assert isinstance(flagged, list)
            print(f"{loops} busy loops, load {result['load_before']:.1f} -> {result['load_after']:.1f}: "
                  f"{len(flagged)} of {result['cells']} honest cells flagged")
            for c in flagged:
                print(f"    {c['implementation']} {c['case']}: {c['status']}: {c['reason']}")
    if args.json is not None:
        args.json.write_text(json.dumps({"cpu": cpu_model(), "conditions": results}, indent=1))


if __name__ == "__main__":
    main()
