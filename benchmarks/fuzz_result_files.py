"""Thousands of damaged result files through `report` and `compare`, and how the outcomes fell.

    PYTHONPATH=. python3 -m benchmarks.fuzz_result_files [--examples 3000]

The structure-aware strategy of ``tests/reliability/fuzz_documents.py`` (valid bench, verify and
pytest-benchmark files with values replaced by any JSON, removed or added) with random seeds. Every outcome
must be exit 0, 1 or 2 and leave no raw string of the file in the page or the summaries; the first that is
not stops the run with Hypothesis's shrunk example. Prints the count of each (report, compare) exit code.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import io
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "reliability"))

from fuzz_documents import damaged_documents, run_both
from hypothesis import HealthCheck, given, settings

from harness.cli import main as attnbench


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=3000)
    args = parser.parse_args()
    outcomes: collections.Counter[tuple[str, int, int]] = collections.Counter()
    started = time.perf_counter()

    @settings(max_examples=args.examples, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(damaged_documents())
    def fuzz(damaged: tuple[str, object]) -> None:
        kind, document = damaged
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            report, compare = run_both(document, attnbench)
        outcomes[(kind, report, compare)] += 1

    fuzz()
    print(f"{sum(outcomes.values())} damaged files in {time.perf_counter() - started:.0f} s "
          f"(load {os.getloadavg()[0]:.1f}); no exit 3, no raw string in a page")
    print("file kind          report  compare  files")
    for (kind, report, compare), n in sorted(outcomes.items()):
        print(f"{kind:18} {report:6} {compare:8} {n:6}")


if __name__ == "__main__":
    main()
