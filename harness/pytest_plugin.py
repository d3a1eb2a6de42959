"""attnbench's pytest plugin (entry point ``pytest11``): the conformance suite in any repository.

After ``pip install attnbench``, pytest loads this module in every session, so it imports nothing
heavy and adds options only under the ``--attnbench-`` prefix::

    pytest --attnbench-plugin my_kernel.py                # in any directory: the conformance suite, on my_kernel.py only
    pytest --attnbench-plugin my_kernel.py --attnbench-builtins   # and on the built-ins (and installed plugins) too
    pytest --attnbench-plugin my_kernel.py --attnbench-only my_attention --attnbench-suite quick
    pytest tests --pyargs harness.conformance --attnbench-plugin my_kernel.py   # beside your own tests

Given an ``--attnbench-`` option and no test paths, the session also collects the packaged
conformance module (:mod:`harness.conformance`); with explicit paths it collects what they name
(add ``--pyargs harness.conformance`` for the suite). The project's own suites (``suites/``) use
the same options: ``--attnbench-only`` selects implementations there too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from harness.contract.discovery import Registry
    from harness.contract.registry import Implementation

CONFORMANCE_MODULE = "harness.conformance"
PACKAGED_MODULES = (CONFORMANCE_MODULE, "harness.performance")
"""The test modules attnbench ships: collected by name (``--pyargs``), from any directory."""
SUITES = ("small", "quick", "full")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("attnbench", "attnbench: the attention conformance suite")
    group.addoption("--attnbench-plugin", action="append", default=[], metavar="PATH.py|MODULE",
                    help="load attention implementations from a file or module (repeatable); runs the conformance suite on them")
    group.addoption("--attnbench-only", action="append", default=[], metavar="NAMES",
                    help="run only these implementations (comma-separated, repeatable)")
    group.addoption("--attnbench-builtins", action="store_true", default=False,
                    help="with --attnbench-plugin: also run attnbench's built-ins and installed plugins "
                         "(default: the plugin files given, alone)")
    group.addoption("--attnbench-suite", default=None, choices=SUITES,
                    help="the conformance cases: small (default, or $ATTNBENCH_VERIFY_SUITE), quick or full")


def _asked_for_attnbench(config: pytest.Config) -> bool:
    return bool(config.getoption("attnbench_plugin") or config.getoption("attnbench_only")
                or config.getoption("attnbench_suite") or config.getoption("attnbench_builtins"))


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    """With an attnbench option: load the plugins now, and with no test paths collect the packaged
    conformance module too. A printed id of a shipped module (``harness.performance::test_attention[...]``) given
    back as an argument is looked up as a module name, as ``--pyargs`` would."""
    if any(str(a).split("::", 1)[0] in PACKAGED_MODULES for a in config.args):
        config.option.pyargs = True
    if not _asked_for_attnbench(config):
        return
    suite_registry(config)  # a plugin that does not load: pytest's usage error (exit 4) before collection
    if config.args_source != pytest.Config.ArgsSource.ARGS:
        import importlib.util

        spec = importlib.util.find_spec(CONFORMANCE_MODULE)
        if spec is not None and spec.origin and spec.origin not in config.args:
            config.args.append(spec.origin)


def _packaged(path: object) -> str | None:
    """The dotted name of a shipped test module at ``path`` (None for any other file)."""
    import importlib.util
    from pathlib import Path

    for name in PACKAGED_MODULES:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.origin and Path(spec.origin) == Path(str(path)):
            return name
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makemodule(module_path: object, parent: pytest.Collector) -> pytest.Module | None:
    """A shipped test module outside the session's root is named by its module name, so every node id pytest prints
    for it (``harness.conformance::test_conforms[...]``) re-runs as printed: pytest's own id would be a path
    relative to the root, or an empty one, which no later run can select."""
    name = _packaged(module_path)
    if name is None or str(module_path).startswith(str(parent.config.rootpath) + "/"):
        return None
    return pytest.Module.from_parent(parent, path=module_path, nodeid=name)  # type: ignore[arg-type]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """One copy of each conformance test: the project's ``suites/correctness`` re-exports the
    packaged module, and a session may collect both."""
    seen: set[str] = set()
    kept = []
    for item in items:
        function = getattr(item, "function", None)
        if getattr(function, "__module__", None) == CONFORMANCE_MODULE:
            if item.name in seen:
                continue
            seen.add(item.name)
        kept.append(item)
    items[:] = kept


_REGISTRY: Registry | None = None


def suite_registry(config: pytest.Config) -> Registry:
    """The registry for this pytest run, loaded once; a broken ``--attnbench-plugin`` stops the run with its error."""
    from harness.contract.discovery import load_registry

    global _REGISTRY
    if _REGISTRY is None:
        plugins = config.getoption("attnbench_plugin")
        everything = not plugins or bool(config.getoption("attnbench_builtins"))  # a plugin given: it alone
        registry = load_registry(plugins, builtins=everything, entry_points=everything)
        if registry.fatal_errors:
            raise pytest.UsageError("; ".join(str(e).replace("--plugin ", "--attnbench-plugin ") for e in registry.fatal_errors))
        _REGISTRY = registry
    return _REGISTRY


def selected_implementations(config: pytest.Config) -> list[Implementation]:
    from harness.errors import UsageError

    registry = suite_registry(config)
    try:
        return registry.select(config.getoption("attnbench_only"))
    except UsageError as exc:  # an unknown name: pytest's own usage error, with the known names
        raise pytest.UsageError(f"--attnbench-only: {exc}") from exc
