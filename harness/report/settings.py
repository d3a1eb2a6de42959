"""What one report is built from: the result files, where it goes and which implementation speedups divide by.

``attnbench report`` and ``attnbench run`` map their flags into one :class:`ReportSettings` and hand it to
:func:`harness.report.builder.build_report`; the defaults live here once. Light to import (no pandas):
the command line builds it before anything heavy loads.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness.errors import UsageError

DEFAULT_BASELINE = "torch_sdpa"
"""The implementation the speedup plot and table divide by, unless another is named."""


@dataclass(frozen=True)
class ReportSettings:
    """One report: ``results`` read in order (a later file's cell replaces an earlier one's), written to ``out``."""

    results: tuple[Path, ...]
    """attnbench result files and/or pytest-benchmark JSON files."""
    out: Path
    """The report directory (created when missing; the report in it is replaced whole or not at all)."""
    baseline: str = DEFAULT_BASELINE
    """The implementation the speedups divide by (baseline median / implementation median)."""

    def __post_init__(self) -> None:
        if not self.results:
            raise UsageError("no result files given; pass one or more results/*.json files")
        object.__setattr__(self, "results", tuple(Path(p) for p in self.results))
        object.__setattr__(self, "out", Path(self.out))
