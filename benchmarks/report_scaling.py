"""How `attnbench report` time grows with the sizes in a sweep: synthetic bench files of N implementations x
T values (7 samples per cell), each read, analysed and written as a whole report, timed.

    PYTHONPATH=. python3 -m benchmarks.report_scaling [--implementations 10] [--sizes 100 200 400] [--no-plots]

Prints seconds per report and the ratio to the previous size: a ratio near the ratio of sizes is linear
growth, near its square quadratic. Load moves the seconds; the growth from one size to the next is the figure.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from harness.case.attention import AttentionCase
from harness.results import BenchCell, ResultWriter
from harness.runtime.cluster.node import cpu_model


def write_sweep(path: Path, implementations: int, sizes: int) -> Path:
    writer = ResultWriter(path, "bench", {"suite": "synthetic"}, force=True)
    writer.set("peaks", {"float32/cpu": {"gflops": 100.0}})
    for i in range(implementations):
        for j in range(sizes):
            t = 16 + 8 * j
            case = AttentionCase(heads=1, tq=t, d=16)
            base = 1e-6 * (1 + i) * (1 + (t / 64) ** 2)
            samples = tuple(base * (1 + 0.01 * ((k * 7 + j) % 5)) for k in range(7))
            writer.append(BenchCell(implementation=f"impl{i}", case=case.to_dict(), case_id=case.id, mode="fwd",
                                    status="ok", samples_s=samples, stats={"median": sorted(samples)[3]},
                                    flops=4.0 * t * t * 16, peak_key="float32/cpu", threads=1))
    writer.finish()
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--implementations", type=int, default=10)
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 200, 400])
    parser.add_argument("--no-plots", action="store_true", help="time reading and analysing only")
    args = parser.parse_args()
    from harness.report.builder import build_report
    from harness.report.findings import analyse
    from harness.report.load import load
    from harness.report.settings import ReportSettings

    print(f"{cpu_model()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
    previous = None
    with tempfile.TemporaryDirectory() as d:
        for sizes in args.sizes:
            path = write_sweep(Path(d) / f"sweep-{sizes}.json", args.implementations, sizes)
            started = time.perf_counter()
            if args.no_plots:
                analyse(load([path]), "impl0")
            else:
                build_report(ReportSettings((path,), Path(d) / f"report-{sizes}", baseline="impl0"))
            seconds = time.perf_counter() - started
            growth = "" if previous is None else f"  x{seconds / previous[1]:.2f} for x{sizes / previous[0]:.2f} sizes"
            print(f"{args.implementations} x {sizes} T values: {seconds:.1f} s{growth}", flush=True)
            previous = (sizes, seconds)
    print(f"load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
