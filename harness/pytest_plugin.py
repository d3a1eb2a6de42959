"""pytest support for the suites: ``--plugin`` and ``--only`` put implementations into the parametrization.

``pytest suites/correctness --plugin my_plugin.py`` runs the conformance suite on a plugin;
``--only NAME`` restricts the suites to some implementations.
"""

from __future__ import annotations

import pytest

from harness.discovery import Registry, load_registry
from harness.errors import UsageError
from harness.registry import Implementation


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("attnbench")
    group.addoption("--plugin", action="append", default=[], metavar="PATH.py|MODULE",
                    help="attnbench: load implementations from a file or module (repeatable)")
    group.addoption("--only", action="append", default=[], metavar="NAMES",
                    help="attnbench: run only these implementations (comma-separated, repeatable)")
    group.addoption("--verify-suite", default=None, choices=("small", "quick", "full"),
                    help="attnbench: the case suite of suites/correctness (default: small, or $ATTNBENCH_VERIFY_SUITE)")


_REGISTRY: Registry | None = None


def suite_registry(config: pytest.Config) -> Registry:
    """The registry for this pytest run, loaded once; a broken ``--plugin`` stops the run with its error."""
    global _REGISTRY
    if _REGISTRY is None:
        registry = load_registry(config.getoption("plugin"))
        if registry.fatal_errors:
            raise pytest.UsageError("; ".join(str(e) for e in registry.fatal_errors))
        _REGISTRY = registry
    return _REGISTRY


def selected_implementations(config: pytest.Config) -> list[Implementation]:
    registry = suite_registry(config)
    try:
        return registry.select(config.getoption("only"))
    except UsageError as exc:  # an unknown --only name: pytest's own usage error, with the known names
        raise pytest.UsageError(str(exc)) from exc


