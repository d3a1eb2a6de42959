"""``attnbench bench``'s within-run ratio, idle and under a load that comes and goes.

    PYTHONPATH=. python3 benchmarks/bench_under_load.py [--runs 5] [--T 1024] [--heads 8] [--d 64]
        [--only tiled_fused,torch_sdpa] [--budget 0.4] [--threads 1] [--clock auto|cpu|wall]
        [--idle-ratio R] [--json FILE]

Runs ``attnbench bench --only tiled_fused,torch_sdpa`` ``--runs`` times as the machine is, then as many times
with a background process that switches a busy loop on and off at random (on 50-500 ms, off 50-500 ms) on one
core (CPU 0). Each run's ratio is the first contender's paired ratio to the second from the result file (the
median of the per-round ratios of the interleaved rounds, with its interval: :class:`harness.results.Rounds`);
beside it, the ratio of the two cells' overall medians. The target is per run: each loaded run's
ratio within 10% of the idle one. The idle ratio is ``--idle-ratio`` when given (measured on an idle machine),
else the median of the runs as the machine is (on a shared machine: not idle; say so with the figures). Prints
every run's ratio and its distance from the idle ratio, how many of the runs fall within 10%, the load average
before and after each condition, the CPU seconds the bench runs used, and the CPU model.
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

from harness.results import read_run
from harness.runtime.cluster.node import cpu_model

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
               str(args.heads), "--d", str(args.d), "--no-memory", "--threads", str(args.threads), "--clock",
               args.clock, "--budget", str(args.budget), "--quiet", "--out", str(out), "--force"]
    before = os.times()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    after = os.times()
    cpu_s = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    cells = {c.implementation: c for c in read_run(out).bench_cells() if c.status.value == "ok"}
    a, b = cells.get(first), cells.get(second)
    if a is None or b is None or a.median is None or b.median is None:
        return {"paired": None, "low": None, "high": None, "medians": None, "cpu_s": cpu_s}
    rounds = a.rounds
    paired = rounds.ratio if rounds is not None and rounds.reference == second else None
    return {"paired": paired, "low": None if rounds is None else rounds.ratio_low,
            "high": None if rounds is None else rounds.ratio_high, "medians": a.median / b.median, "cpu_s": cpu_s,
            "load": os.getloadavg()[0]}


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
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--T", type=int, nargs="+", default=[1024])
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--d", type=int, default=64)
    parser.add_argument("--only", default="tiled_fused,torch_sdpa")
    parser.add_argument("--budget", type=float, default=0.4)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--clock", choices=("auto", "cpu", "wall"), default="auto")
    parser.add_argument("--idle-ratio", type=float, help="the ratio measured on an idle machine (default: the "
                        "median of this machine's runs without the added load)")
    parser.add_argument("--skip-quiet", action="store_true", help="only the loaded runs (give --idle-ratio)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        quiet = None if args.skip_quiet else condition(args, False, Path(tmp))
        loaded = condition(args, True, Path(tmp))
    print(f"CPU: {cpu_model()}; {os.cpu_count()} logical CPUs; case B1-H{args.heads}-T{args.T}-d{args.d} float32 fwd; "
          f"--threads {args.threads} --clock {args.clock} --budget {args.budget}")
    idle = args.idle_ratio if args.idle_ratio is not None else (quiet or {}).get("paired_median")
    source = "given (--idle-ratio)" if args.idle_ratio is not None else "median of the runs without added load"
    print(f"idle ratio: {idle if idle is None else round(float(idle), 3)} ({source})")  # type: ignore[arg-type]
    for result in (quiet, loaded):
        if result is None:
            continue
        name = "with the on/off busy loop on CPU 0" if result["loaded"] else "as the machine is (no added load)"
        print(f"\n{name}: load average {result['load_before']:.2f} -> {result['load_after']:.2f}")
        within = 0
        for i, run in enumerate(result["runs"]):  # type: ignore[arg-type]
            paired, low, high, medians = run["paired"], run["low"], run["high"], run["medians"]
            text = "no paired ratio" if paired is None else f"paired {paired:.3f} [{low:.3f}, {high:.3f}]"
            off = ""
            if paired is not None and isinstance(idle, float):
                off = f" ({100 * (paired / idle - 1):+.1f}% from idle)"
                within += abs(paired / idle - 1) <= 0.10
            print(f"  run {i + 1}: {text}{off}; ratio of overall medians "
                  f"{medians if medians is None else round(medians, 3)}; {run['cpu_s']:.1f} CPU s; load {run.get('load', 0):.1f}")
        print(f"  median over runs: paired {result['paired_median']}, of medians {result['medians_median']}")
        if isinstance(idle, float):
            print(f"  runs within 10% of the idle ratio: {within} of {len(result['runs'])}")  # type: ignore[arg-type]
    if args.json:
        args.json.write_text(json.dumps({"cpu": cpu_model(), "idle_ratio": idle, "quiet": quiet, "loaded": loaded},
                                        indent=1))


if __name__ == "__main__":
    main()
