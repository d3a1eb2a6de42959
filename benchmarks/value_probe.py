"""The value probe on honest dense kernels and on a kernel with a data-dependent fast path, and what it costs.

    PYTHONPATH=. python3 benchmarks/value_probe.py [--repeats 3] [--overhead 2]

1. ``--repeats`` runs of ``attnbench bench --value-probe all`` on the honest built-ins numpy_naive, torch_sdpa and
   tiled_fused and on tests/integrity/value_dependent.py's zero_shortcut (all-zero queries take an O(T d)
   shortcut), at T = 256 and 512, H = 4, d = 64: each cell's verdict, derived from its stored samples. The dense
   kernels must never be called data-dependent; zero_shortcut must be, for zeros.
2. The probe on cases with a boolean mask (which bench's quick suite has none of), so the sparse-mask
   distribution is timed too: the worker's task run here (one thread), on the honest built-ins; a key-padding
   mask, and a random one (whose own pattern a dense kernel's masked softmax mispredicts: see the output).
3. ``--overhead`` pairs of ``attnbench bench --suite quick --only numpy_naive,torch_sdpa --T 256 512`` with
   ``--value-probe off`` and ``one`` (the default), alternating: each run's wall time.

Prints the CPU and the load average before and after. Nothing here asserts anything: these are figures to report.
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):  # as bench's workers run: one thread
    os.environ[_variable] = "1"  # (part 2 times here, on the CPU clock, which a spinning BLAS pool would inflate)
from harness.analysis.values import shifts, verdict_line  # noqa: E402  (the checkout's harness, run as a script)
from harness.results import read_run  # noqa: E402
from harness.runtime.cluster.node import cpu_model  # noqa: E402

PLUGIN = ROOT / "tests" / "integrity" / "value_dependent.py"
HONEST = ("numpy_naive", "torch_sdpa", "tiled_fused")
SMALL = ["--T", "256", "512", "--heads", "4", "--d", "64", "--mode", "fwd", "--no-memory", "--threads", "1",
         "--roof-budget", "0.05", "--quiet"]


def _bench(*args: str) -> float:
    """``attnbench bench ARGS`` as a subprocess of this checkout; its wall time in seconds."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "harness", "bench", *args], env=env, capture_output=True, text=True)
    if done.returncode not in (0, 1):
        raise SystemExit(done.stderr[-3000:])
    return time.perf_counter() - started


def _verdicts(repeats: int, tmp: Path) -> None:
    print(f"1. bench --value-probe all, {', '.join(HONEST)} and zero_shortcut, T 256 and 512, H 4, d 64 "
          f"({repeats} runs)")
    for run in range(repeats):
        out = tmp / f"probe{run}.json"
        _bench("--plugin", str(PLUGIN), "--only", ",".join((*HONEST, "zero_shortcut")), "--value-probe", "all",
               *SMALL, "--out", str(out))
        for cell in read_run(out).bench_cells():
            if cell.value_probe is None:
                print(f"  run {run + 1}: {cell.implementation} {cell.case_id}: {cell.status}, not probed")
                continue
            ratios = ", ".join(f"{s.distribution} {s.ratio:.2f} [{s.low:.2f}, {s.high:.2f}]"
                               for s in shifts(cell.value_probe))
            print(f"  run {run + 1}: {cell.implementation:13} {cell.case_id:24} {verdict_line(cell.value_probe)}")
            print(f"         calls/round {cell.value_probe.round_sizes[0] if cell.value_probe.round_sizes else 0}: {ratios}")


def _masked() -> None:
    from harness.bench.timing import TimingConfig
    from harness.bench.values import value_probe_task
    from harness.case.attention import AttentionCase
    from harness.contract.discovery import load_registry

    registry = load_registry()
    for mask in ("key_padding", "random"):
        case = AttentionCase(batch=2, heads=4, tq=512, d=64, mask=mask)
        print(f"\n2. the probe's task on {case.id} (a boolean mask: the sparse-mask distribution is timed), CPU clock")
        for name in HONEST:
            probe = value_probe_task(name, registry.sources[name], case.to_dict(), "fwd",
                                     TimingConfig(budget_s=0.4, clock="cpu"), 1)
            ratios = ", ".join(f"{s.distribution} {s.ratio:.2f} [{s.low:.2f}, {s.high:.2f}]" for s in shifts(probe))
            print(f"  {name:13} {verdict_line(probe)}\n         {ratios}")


def _overhead(pairs: int, tmp: Path) -> None:
    print(f"\n3. bench --suite quick --only numpy_naive,torch_sdpa --T 256 512 (default budgets), wall time, {pairs} "
          "alternating pairs")
    walls: dict[str, list[float]] = {"off": [], "one": []}
    for i in range(pairs):
        for setting in ("off", "one") if i % 2 == 0 else ("one", "off"):
            wall = _bench("--suite", "quick", "--only", "numpy_naive,torch_sdpa", "--T", "256", "512", "--quiet",
                          "--value-probe", setting, "--out", str(tmp / f"overhead-{setting}-{i}.json"))
            walls[setting].append(wall)
            print(f"  --value-probe {setting}: {wall:.1f} s")
    off, one = statistics.median(walls["off"]), statistics.median(walls["one"])
    print(f"  median: off {off:.1f} s, one {one:.1f} s: the probe adds {one - off:+.1f} s ({100 * (one - off) / off:+.0f}%)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--overhead", type=int, default=3, help="pairs of runs with the probe off and on (0: none)")
    args = parser.parse_args()
    print(f"CPU: {cpu_model()}, {os.cpu_count()} cores; load average {os.getloadavg()[0]:.1f} at the start")
    with tempfile.TemporaryDirectory() as tmp:
        _verdicts(args.repeats, Path(tmp))
        _masked()
        if args.overhead:
            _overhead(args.overhead, Path(tmp))
    print(f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
