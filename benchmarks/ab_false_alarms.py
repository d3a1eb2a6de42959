"""`attnbench ab`'s false-alarm and detection rates, measured under a load that switches on and off.

    PYTHONPATH=. python3 benchmarks/ab_false_alarms.py [--runs 10] [--rounds 20] [--T 256] [--reps 10] [--clock auto|cpu|wall]

A background process runs a busy loop on one core, switching it on and off at random (each phase
0.1-2 s), for the whole measurement. Meanwhile `attnbench ab` runs ``--runs`` times on two copies of the
same plugin (an A/A test: every exit 1 is a false alarm) and ``--runs`` times against a head doing 30%
more work (the same attention repeated 13 times per call instead of 10: every exit 1 is a detection).
Targets: at most 1 false alarm in 10, at least 9 detections in 10, every detected ratio within
1.15-1.45. The design bound on false alarms is alpha/2 = 2.5% per comparison (docs/ci.md). Prints each
run (exit status, ratio, interval, load seen) and the summary with the CPU and the load average.
Nothing here asserts anything: these are figures to report.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from harness.runtime.cluster.node import cpu_model  # noqa: E402  (the checkout's harness, run as a script)

PLUGIN = '''import torch
from harness import register

REPS = {reps}


@register("work", backend="torch", description="softmax(q k^T) v, REPS times")
def work(q, k, v, *, causal=False, mask=None, scale=None):
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    out = None
    for _ in range(REPS):
        out = torch.softmax((q @ k.transpose(-1, -2)) * scale, dim=-1) @ v
    return out
'''
LOAD = '''import random, time
rng = random.Random()
while True:
    until = time.monotonic() + rng.uniform(0.1, 2.0)
    if rng.random() < 0.5:
        while time.monotonic() < until:
            pass
    else:
        time.sleep(until - time.monotonic())
'''


def _plugin(root: Path, reps: int) -> Path:
    root.mkdir(parents=True)
    path = root / "plugin.py"
    path.write_text(PLUGIN.format(reps=reps))
    return path


def _ab(base: Path, head: Path, args: argparse.Namespace, out: Path) -> dict[str, object]:
    command = [sys.executable, "-m", "harness", "ab", str(base), str(head), "--only", "work", "--T", str(args.T),
               "--d", "64", "--heads", "4", "--rounds", str(args.rounds), "--calls", str(args.calls),
               "--clock", args.clock, "--out", str(out), "--json", "-", "--quiet"]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=900)
    if done.returncode not in (0, 1):
        raise SystemExit(f"attnbench ab failed ({done.returncode}): {done.stderr[-2000:]}")
    verdict = json.loads(done.stdout)
    (cell,) = verdict["cells"]
    return {"code": done.returncode, **cell}


def _line(kind: str, i: int, r: dict[str, object]) -> str:
    return (f"{kind} {i + 1:2d}: exit {r['code']}  ratio {float(r['ratio']):.3f} [{float(r['low']):.3f}, "  # type: ignore[arg-type]
            f"{float(r['high']):.3f}]  {r['verdict']:<10s} ratio IQR {float(r['ratio_spread']):.0%}  "  # type: ignore[arg-type]
            f"base IQR {float(r['base_spread'] or 0):.0%}  load {float(r['load_min']):.1f}-{float(r['load_max']):.1f}")  # type: ignore[arg-type]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--calls", type=int, default=3)
    parser.add_argument("--T", type=int, default=256)
    parser.add_argument("--reps", type=int, default=10, help="the base's repetitions; the slow head does 1.3x as many")
    parser.add_argument("--clock", choices=("auto", "cpu", "wall"), default="auto",
                        help="attnbench ab --clock (auto: cpu here, one thread)")
    args = parser.parse_args()
    slow_reps = round(args.reps * 1.3)
    print(f"CPU: {cpu_model()}, {os.cpu_count()} cores; clock {args.clock}; load before: "
          f"{open('/proc/loadavg').read().split()[:3]}")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a stop still ends the load below
    load = subprocess.Popen([sys.executable, "-c", LOAD])
    results: dict[str, list[dict[str, object]]] = {"A/A": [], "slow": []}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            base, same = _plugin(Path(tmp) / "base", args.reps), _plugin(Path(tmp) / "same", args.reps)
            slow = _plugin(Path(tmp) / "slow", slow_reps)
            for i in range(args.runs):  # alternate, so both series see the same spells of load
                for kind, head in (("A/A", same), ("slow", slow)):
                    r = _ab(base, head, args, Path(tmp) / f"out-{kind[0]}-{i}")
                    results[kind].append(r)
                    print(_line(kind, i, r), flush=True)
    finally:
        load.kill()
        load.wait()
    alarms = sum(r["code"] == 1 for r in results["A/A"])
    found = [r for r in results["slow"] if r["code"] == 1]
    ratios = [float(r["ratio"]) for r in results["slow"]]  # type: ignore[arg-type]
    loads = [float(x) for r in results["A/A"] + results["slow"] for x in (r["load_min"], r["load_max"])]  # type: ignore[arg-type]
    print(f"\nA/A (identical plugins): {alarms} of {args.runs} failed (target <= 1; design bound alpha/2 = 2.5%)")
    print(f"head with {slow_reps / args.reps:.2f}x the work: {len(found)} of {args.runs} flagged (target >= 9); "
          f"ratios {min(ratios):.3f}-{max(ratios):.3f} (target 1.15-1.45, all: "
          f"{'yes' if all(1.15 <= x <= 1.45 for x in ratios) else 'no'})")
    print(f"load average seen during the runs: {min(loads):.1f}-{max(loads):.1f} on {os.cpu_count()} cores "
          f"(a busy loop switching on and off on one core, plus the machine's other work); "
          f"after: {open('/proc/loadavg').read().split()[:3]}")


if __name__ == "__main__":
    main()
