"""What a comparison may judge: two whole runs of the same cells.

A comparison that passes is a CI gate that opens, so its inputs are checked before any ratio: a run
that stopped early (``complete: false``: interrupted, killed, out of time) or a new run that lacks
cells the base run measured says nothing about those cells, and "0 regressions" over half the cells
is no evidence. Each is a usage error (exit 2) naming the file and the fix, unless the caller says
it means it (``--allow-incomplete``, ``--allow-missing``: then the cells in common are compared).
A measured cell's times are finite and positive in every file that reads at all
(:mod:`harness.results.validate`), so no NaN is "unchanged" and no negative time an "improvement".
"""

from __future__ import annotations

from pathlib import Path

from harness.errors import UsageError
from harness.results import Run, Status

SHOWN = 3


def check_inputs(base_path: Path, base: Run, new_path: Path, new: Run, *, allow_incomplete: bool = False,
                 allow_missing: bool = False) -> None:
    """A UsageError unless both runs are complete and ``new`` has every cell ``base`` measured (or allowed)."""
    for path, run in ((base_path, base), (new_path, new)):
        if not run.complete and not allow_incomplete:
            raise UsageError(f"{path}: an incomplete run (\"complete\": false: it stopped before its last cell); "
                             f"finish it with `attnbench bench --resume {path}`, or pass --allow-incomplete to "
                             "compare the cells it has")
    have = {(c.implementation, c.case_id, c.mode or "fwd") for c in new.bench_cells()}
    missing = sorted({(c.implementation, c.case_id, c.mode or "fwd") for c in base.bench_cells()
                      if c.status == Status.OK} - have)
    if missing and not allow_missing:
        shown = ", ".join(" ".join(key) for key in missing[:SHOWN]) + (", ..." if len(missing) > SHOWN else "")
        raise UsageError(f"{new_path}: {len(missing)} cell(s) measured in {base_path} are missing ({shown}); "
                         "a run of fewer cells cannot show they did not regress: run the same suite and "
                         "implementations, or pass --allow-missing to compare the cells in common")
