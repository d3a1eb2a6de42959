"""What each red-team plugin (tests/integrity/redteam/) gains, and what bench made of it.

    PYTHONPATH=. python3 benchmarks/redteam_gains.py [--T 256] [--budget 0.2] [--rounds 6]

Runs the same two benches as tests/integrity/test_redteam.py (every plugin of the set with torch_sdpa beside it;
the clock patcher in a bench of its own, also with torch_sdpa), with a larger budget, and prints per
implementation: its status, its median, and its per-round ratio to torch_sdpa (the median of the ratios of
medians within each round, harness.bench.rounds): a cheat's gain is a ratio well under an honest plugin's. In
the clock patcher's own run the parent's clock is slowed too, so torch_sdpa there is flagged (its worker's clock
disagrees with the parent's) while its samples stay true: the ratio shows the patcher's gain. Prints the CPU and
the load average; nothing here asserts anything: these are figures to report.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.measuring import load_average
from harness.runtime.cluster.node import cpu_model

ROOT = Path(__file__).resolve().parent.parent
SET = ROOT / "tests" / "integrity" / "redteam"
FILES = ("peekers.py", "precompute.py", "hooks.py", "tamper.py", "honest.py")


def _bench(out: Path, files: tuple[str, ...], args: argparse.Namespace) -> None:
    plugins = [a for name in files for a in ("--plugin", str(SET / name))]
    only = ",".join([*_names(files), "torch_sdpa"])
    subprocess.run([sys.executable, "-m", "harness", "bench", *plugins, "--only", only, "--T", str(args.T), "--heads", "2",
                    "--d", "64", "--mode", "fwd", "--budget", str(args.budget), "--min-samples", "3", "--rounds",
                    str(args.rounds), "--no-memory", "--threads", "1", "--quiet", "--out", str(out)],
                   stdout=subprocess.DEVNULL, check=False)


def _names(files: tuple[str, ...]) -> list[str]:
    import re

    return [m for name in files for m in re.findall(r'@register\("([a-z_0-9]+)"', (SET / name).read_text())]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--T", type=int, default=256)
    parser.add_argument("--budget", type=float, default=0.2)
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        runs = []
        for files, out in ((FILES, Path(tmp) / "set.json"), (("clock_patch.py",), Path(tmp) / "clock.json")):
            _bench(out, files, args)  # one bench at a time: neither run's figures share the cores with the other
            runs.append(json.loads(out.read_text())["cells"])
    print(f"CPU: {cpu_model()}, {os.cpu_count()} logical; {load_average()}")
    print(f"{'implementation':22} {'status':12} {'median us':>10} {'x torch_sdpa':>13}")
    for cells in runs:
        for cell in cells:
            rounds = cell.get("rounds") or {}
            median = (cell.get("stats") or {}).get("median")
            ratio = rounds.get("ratio")
            print(f"{cell['implementation']:22} {cell['status']:12} "
                  f"{'-' if median is None else f'{median * 1e6:.0f}':>10} {'-' if ratio is None else f'{ratio:.2f}':>13}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
