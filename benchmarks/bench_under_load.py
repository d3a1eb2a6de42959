"""``attnbench bench``'s within-run ratio, idle and under a load that comes and goes.

    PYTHONPATH=. python3 benchmarks/bench_under_load.py [--runs 3] [--T 1024] [--heads 8] [--d 64]
        [--only tiled_fused,torch_sdpa] [--budget 0.4] [--json FILE]

Runs ``attnbench bench --only tiled_fused,torch_sdpa`` ``--runs`` times as the machine is, then as many times
with a background process that switches a busy loop on and off at random (on 50-500 ms, off 50-500 ms) on one
core (CPU 0). Each run's ratio is the first contender's paired ratio to the second from the result file (the
median of the per-round ratios of the interleaved rounds, with its interval: :class:`harness.results.Rounds`);
beside it, the ratio of the two cells' overall medians. Prints per condition the median ratio over the runs,
the load average and the CPU, and how far the loaded ratio is from the quiet one (the target: within 10%).
Nothing here asserts anything: the figures are to report, not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from harness.cluster.node import cpu_model
from harness.results import read_run

BUSY_LOOP = """
import os, random, time
os.sched_setaffinity(0, {0})
rng = random.Random()
while True:
    end = time.perf_counter() + rng.uniform(0.05, 0.5)
    while time.perf_counter() < end:
        pass
    time.sleep(rng.uniform(0.05, 0.5))
"""


def one_run(args: argparse.Namespace, out: Path) -> dict[str, float | None]:
    """One bench run; the paired ratio (first / second contender) with its interval, and the ratio of medians."""
    first, second = args.only.split(",")[:2]
    command = [sys.executable, "-m", "harness", "bench", "--only", args.only, "--T", *map(str, args.T), "--heads",
               str(args.heads), "--d", str(args.d), "--no-memory", "--threads", "1", "--budget", str(args.budget),
               "--quiet", "--out", str(out), "--force"]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    cells = {c.implementation: c for c in read_run(out).bench_cells() if c.status.value == "ok"}
    a, b = cells.get(first), cells.get(second)
    if a is None or b is None or a.median is None or b.median is None:
        return {"paired": None, "low": None, "high": None, "medians": None}
    rounds = a.rounds
    paired = rounds.ratio if rounds is not None and rounds.reference == second else None
    return {"paired": paired, "low": None if rounds is None else rounds.ratio_low,
            "high": None if rounds is None else rounds.ratio_high, "medians": a.median / b.median}


def condition(args: argparse.Namespace, loaded: bool, folder: Path) -> dict[str, object]:
    loop = subprocess.Popen([sys.executable, "-c", BUSY_LOOP]) if loaded else None
    try:
        before = os.getloadavg()[0]
        runs = [one_run(args, folder / f"{'loaded' if loaded else 'quiet'}-{i}.json") for i in range(args.runs)]
        after = os.getloadavg()[0]
    finally:
        if loop is not None:
            loop.kill()
            loop.wait()
    paired = [r["paired"] for r in runs if r["paired"] is not None]
    medians = [r["medians"] for r in runs if r["medians"] is not None]
    return {"loaded": loaded, "runs": runs, "load_before": before, "load_after": after,
            "paired_median": statistics.median(paired) if paired else None,
            "medians_median": statistics.median(medians) if medians else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--T", type=int, nargs="+", default=[1024])
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--d", type=int, default=64)
    parser.add_argument("--only", default="tiled_fused,torch_sdpa")
    parser.add_argument("--budget", type=float, default=0.4)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        quiet = condition(args, False, Path(tmp))
        loaded = condition(args, True, Path(tmp))
    print(f"CPU: {cpu_model()}; {os.cpu_count()} logical CPUs; case B1-H{args.heads}-T{args.T}-d{args.d} float32 fwd")
    for result in (quiet, loaded):
        name = "with the on/off busy loop on CPU 0" if result["loaded"] else "as the machine is (no added load)"
        print(f"\n{name}: load average {result['load_before']:.2f} -> {result['load_after']:.2f}")
        for i, run in enumerate(result["runs"]):  # type: ignore[arg-type]
            paired, low, high, medians = run["paired"], run["low"], run["high"], run["medians"]
            text = "no paired ratio" if paired is None else f"paired {paired:.3f} [{low:.3f}, {high:.3f}]"
            print(f"  run {i + 1}: {text}; ratio of overall medians {medians if medians is None else round(medians, 3)}")
        print(f"  median over runs: paired {result['paired_median']}, of medians {result['medians_median']}")
    q, ld = quiet["paired_median"], loaded["paired_median"]
    if isinstance(q, float) and isinstance(ld, float):
        print(f"\nloaded / quiet paired ratio: {ld / q:.3f} ({100 * abs(ld / q - 1):.1f}% apart; target: within 10%)")
    if args.json:
        args.json.write_text(json.dumps({"cpu": cpu_model(), "quiet": quiet, "loaded": loaded}, indent=1))


if __name__ == "__main__":
    main()
