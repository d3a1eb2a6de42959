"""Repository-wide pytest set-up: what ``addopts`` in pyproject.toml cannot say alone."""

from __future__ import annotations

import pytest

BENCHMARK_OPTIONS = ("benchmark_enable", "benchmark_only", "benchmark_json", "benchmark_save", "benchmark_autosave",
                     "benchmark_compare")


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """A run that asks pytest-benchmark for figures runs in one process: addopts start pytest-xdist for the
    tests, and timings taken beside another test process would be neither alone nor honest (pytest-benchmark
    turns itself off under xdist)."""
    if config.getoption("dist", "no") != "no" and any(config.getoption(name, None) for name in BENCHMARK_OPTIONS):
        config.option.dist = "no"
        config.option.numprocesses = 0


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Slow tests first, in their order, then the rest: the test processes take work units in collection order,
    so the long ones (a verify corpus, a Ray cluster) start at once and the short ones fill in beside them,
    instead of a long one starting last and running alone (the longest-first rule of scheduling)."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
