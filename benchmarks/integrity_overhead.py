"""What a change to the bench's integrity checks costs a bench run: the same small sweep timed with two harness
trees, interleaved: a checkout before the change and one with it.

    git worktree add ../attnbench-main main      # the checkout before, once
    python3 benchmarks/integrity_overhead.py --base ../attnbench-main --new . --pairs 3

Each pair runs ``attnbench bench --only tiled_fused,torch_sdpa`` (T 256 and 512, H 2, d 64, fwd, no memory
measure) once with ``PYTHONPATH=<base>`` and once with ``PYTHONPATH=<new>``, in alternating order, and prints
each run's wall time, the load average before it, the ratio new / base of each pair and their median. On a
shared machine the load moves between runs; pairs run back to back see nearly the same load, so the paired
ratio is the figure to quote, with the load beside it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SWEEP = ["--only", "tiled_fused,torch_sdpa", "--T", "256,512", "--heads", "2", "--d", "64", "--mode", "fwd",
         "--no-memory", "--quiet"]


def bench_wall_s(tree: Path, out: Path) -> float:
    env = {**os.environ, "PYTHONPATH": str(tree.resolve())}
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "harness", "bench", *SWEEP, "--out", str(out)], env=env,
                          capture_output=True, text=True, cwd=tree)
    wall = time.perf_counter() - started
    if proc.returncode not in (0, 1):
        raise SystemExit(f"bench in {tree} exited {proc.returncode}: {proc.stderr[-2000:]}")
    return wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", type=Path, required=True,
                        help="a checkout of the harness before the change (e.g. a git worktree of main)")
    parser.add_argument("--new", type=Path, required=True, help="a checkout of the harness with the change (e.g. .)")
    parser.add_argument("--pairs", type=int, default=3)
    args = parser.parse_args()
    ratios = []
    with tempfile.TemporaryDirectory() as tmp:
        for pair in range(args.pairs):
            order = [("base", args.base), ("new", args.new)]
            if pair % 2:
                order.reverse()
            walls = {}
            for label, tree in order:
                load = os.getloadavg()[0]
                walls[label] = bench_wall_s(tree, Path(tmp) / f"{label}-{pair}.json")
                print(f"pair {pair} {label}: {walls[label]:.1f} s (load {load:.2f})", flush=True)
            ratios.append(walls["new"] / walls["base"])
            print(f"pair {pair}: new / base = {ratios[-1]:.3f}", flush=True)
    print(f"median new / base over {len(ratios)} pairs: {statistics.median(ratios):.3f} "
          f"(CPU: {os.cpu_count()} logical; load now {os.getloadavg()[0]:.2f})")


if __name__ == "__main__":
    main()
