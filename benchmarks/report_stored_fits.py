"""What reading the fits bench stored saves the report: the main job's bench file (tests/data/schema_v1), analysed
with and without the cost-model fits bench now stores, interleaved in one process.

    PYTHONPATH=. python3 -m benchmarks.report_stored_fits [--repeats 3] [FILE]

Prints the seconds bench spends fitting when a run finishes (once), then the report's analysis of the same file
without stored fits (it fits every sweep) and with them (it reads them): the minimum over the repeats of each,
and the machine's load. The fits are the same either way (tests/test_stored_fits.py); only the time differs.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

DEFAULT = Path(__file__).resolve().parent.parent / "tests" / "data" / "schema_v1" / "main-job-bench.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("file", nargs="?", type=Path, default=DEFAULT, help="a bench result file")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    from harness.analysis.sweepfits import run_fits
    from harness.report.findings import analyse
    from harness.report.load import load
    from harness.report.sources import load_run
    from harness.results.files import dumps

    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
    _, run = load_run(args.file)
    started = time.perf_counter()
    fits = run_fits(run.cells, run.implementations)
    print(f"bench, fitting {sum(f.get('model') == 'cost' for f in fits)} cost models at the end of the run: "
          f"{time.perf_counter() - started:.2f} s")
    data = json.loads(args.file.read_text())
    data["fits"] = json.loads(dumps(fits))
    with tempfile.TemporaryDirectory() as d:
        stored = Path(d) / "with-fits.json"
        stored.write_text(json.dumps(data))
        seconds: dict[str, list[float]] = {"without stored fits": [], "with stored fits": []}
        for _ in range(args.repeats):
            for label, path in (("without stored fits", args.file), ("with stored fits", stored)):
                results = load([path])
                started = time.perf_counter()
                analyse(results, "torch_sdpa")
                seconds[label].append(time.perf_counter() - started)
    for label, times in seconds.items():
        print(f"report analysis {label}: {min(times):.2f} s (min of {len(times)})")
    print(f"load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
