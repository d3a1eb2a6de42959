"""Benchmarking: plan cells, time them and measure their memory in workers, store them, fit scaling.

Library use: ``harness.bench.run(BenchSettings(...), out)`` returns the typed
:class:`~harness.results.Run`. Imported lazily, so that ``attnbench --help`` loads no runner.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harness.bench.session import resume_settings, run
    from harness.bench.settings import BenchSettings

__all__ = ["BenchSettings", "resume_settings", "run"]


def __getattr__(name: str) -> Any:
    if name == "BenchSettings":
        from harness.bench.settings import BenchSettings

        return BenchSettings
    if name in ("run", "resume_settings"):
        from harness.bench import session

        return getattr(session, name)
    raise AttributeError(f"module 'harness.bench' has no attribute {name!r}")
