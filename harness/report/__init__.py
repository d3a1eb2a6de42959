"""Reports: result files in, ``index.html`` + ``summary.md`` + ``plots/*.png`` + CSV tables out.

:func:`build_report` is the entry point (``attnbench report`` calls it with one :class:`ReportSettings`): :func:`load` reads the
files, :func:`analyse` derives everything once, and the plots and writers format the result.
The package reads only result files (attnbench JSON and pytest-benchmark JSON); it never runs a
plugin.
"""

from __future__ import annotations

import importlib
from typing import Any

from harness.report.settings import DEFAULT_BASELINE, ReportSettings

_LAZY = {"Report": "harness.report.builder", "build_report": "harness.report.builder",
         "Results": "harness.report.load", "load": "harness.report.load",
         "Analysis": "harness.report.findings", "analyse": "harness.report.findings"}

__all__ = ["DEFAULT_BASELINE", "Analysis", "Report", "ReportSettings", "Results", "analyse", "build_report", "load"]


def __getattr__(name: str) -> Any:
    """pandas and matplotlib load on first use, so ``attnbench --help`` does not pay for them."""
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'harness.report' has no attribute {name!r}")
