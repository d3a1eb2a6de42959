"""Reports: result files in, ``index.html`` + ``summary.md`` + ``plots/*.png`` + CSV tables out.

:func:`build_report` is the entry point (``attnbench report`` calls it). The package reads
only result files (attnbench JSON and pytest-benchmark JSON); it never runs a plugin.
"""

from harness.report.builder import DEFAULT_BASELINE, Report, build_report
from harness.report.load import Results, load

__all__ = ["DEFAULT_BASELINE", "Report", "Results", "build_report", "load"]
