"""Benchmarks run when asked for: ``--benchmark-json``/``--benchmark-save``/``--benchmark-only`` enable them.

The project's pytest addopts carry ``--benchmark-disable`` so that a plain ``pytest`` run
only checks that each benchmark runs once. Asking for benchmark output means asking for
benchmarks, so those options switch them back on (like ``--benchmark-enable``).
"""

from __future__ import annotations

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    wants_output = any(config.getoption(name, None) for name in
                       ("benchmark_json", "benchmark_save", "benchmark_autosave", "benchmark_only"))
    if wants_output:
        config.option.benchmark_enable = True
