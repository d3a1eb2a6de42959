"""Find implementations: entry points (built-ins included), plugin files and plugin modules.

Like pytest's ``pytest11`` group, the entry-point group ``attnbench.implementations``
is the one road in; attnbench's own built-ins are declared there in ``pyproject.toml``.
When attnbench runs from a source tree that was never installed, the built-ins are
found by scanning the ``implementations`` package instead, and the registry says so.

A plugin that fails to import (an exception, or an exit: ``sys.exit`` or ``os._exit`` at import) becomes a
:class:`LoadError` that names its source; the others still load.

The command's process loads every source to read what each declares; a worker loads only
the source of the implementation it runs (:func:`load_source`, by the spec
:attr:`Registry.sources` gives), so one plugin's import never runs in another's worker.

It is one module: the three roads in (entry points, a plugin file, a module) record
into one :class:`Registry`, which is what each of them found and why a source failed.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import pkgutil
import sys
import traceback
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from types import ModuleType

from harness.contract import plugin_state
from harness.contract.registry import Implementation
from harness.errors import PluginError, UsageError
from harness.runtime import provenance

ENTRY_POINT_GROUP = "attnbench.implementations"
BUILTIN_PACKAGE = "implementations"
IMPORTING = "while being imported"
ENTRY_POINT_SOURCE = "entry-point:"
"""A source spec naming one entry point of :data:`ENTRY_POINT_GROUP` (``entry-point:NAME=VALUE``, loadable
where the distribution is not installed: a cluster node); any other spec is a ``--plugin`` spec, a file
path (absolute) or a module name (the built-ins' modules included)."""


@dataclass(frozen=True)
class LoadError:
    """A plugin source that could not be loaded, and why."""

    source: str
    error: str
    requested: bool = False
    """True when the user asked for this source by ``--plugin``: then it is fatal for the command."""
    clash: bool = False
    """Two implementations share a name: always fatal, since which one a name means is unknowable."""

    def __str__(self) -> str:
        return self.error if self.clash else f"could not load {self.source}: {self.error}"


def only_names(given: Iterable[str] | None) -> list[str]:
    """The names ``--only`` flags give (comma-separated, repeatable); a UsageError when flags were given but name
    nothing (``--only "$EMPTY"``): a selection that names nothing never means "everything"."""
    given = list(given or [])
    wanted = [n.strip() for raw in given for n in raw.split(",") if n.strip()]
    if given and not wanted:
        raise UsageError(f"--only {' '.join(repr(g) for g in given)} names no implementation; give names "
                         "(comma-separated, see `attnbench list`) or leave --only out to select all")
    return wanted


@dataclass
class Registry:
    """All loaded implementations by name, plus the sources that failed to load."""

    implementations: dict[str, Implementation] = field(default_factory=dict)
    errors: list[LoadError] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    sources: dict[str, str] = field(default_factory=dict)
    """Implementation name -> the source spec that loads it alone (:func:`load_source`)."""

    def __iter__(self) -> Iterator[Implementation]:
        return iter(self.implementations.values())

    def __len__(self) -> int:
        return len(self.implementations)

    def __contains__(self, name: object) -> bool:
        return name in self.implementations

    def get(self, name: str) -> Implementation:
        try:
            return self.implementations[name]
        except KeyError:
            known = ", ".join(sorted(self.implementations)) or "none"
            raise UsageError(f"no implementation named {name!r}; known: {known} (see `attnbench list`)") from None

    def select(self, names: Iterable[str] | None) -> list[Implementation]:
        """The implementations named; when ``names`` is empty, all but those declared ``on_request``."""
        wanted = only_names(names)
        if not wanted:
            return [impl for impl in self if not impl.declared.on_request]
        return [self.get(n) for n in wanted]

    def add(self, impl: Implementation, origin: str, source: str) -> None:
        if impl.name in self.implementations:
            first = self.implementations[impl.name]
            if first.source == impl.source:
                return  # the same declaration reached us twice (entry point and scan)
            self.errors.append(LoadError(
                origin,
                f"two implementations are named {impl.name!r}: one from {first.source}, one from "
                f"{impl.source}; rename one of them (a name must say which implementation it means)",
                clash=True,
            ))
            return
        self.implementations[impl.name] = impl
        self.sources[impl.name] = source

    @property
    def fatal_errors(self) -> list[LoadError]:
        return [e for e in self.errors if e.requested or e.clash]


def _describe(exc: BaseException) -> str:
    if isinstance(exc, plugin_state.RefusedExit):
        return str(exc)
    if isinstance(exc, SystemExit):  # a plugin's exit is its own failure to load, never the command's exit
        return f"it called sys.exit({exc.code!r}) while being imported; a plugin must not exit"
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" (at {frames[-1].filename}:{frames[-1].lineno})" if frames else ""
    return f"{type(exc).__name__}: {exc}{where}"


def _collect(registry: Registry, obj: object, origin: str, source: str) -> int:
    """Add what ``obj`` (a module or a decorated function) declared; return how many."""
    if isinstance(obj, ModuleType):
        impls = declared_in(obj)
    elif isinstance(getattr(obj, "__attnbench__", None), Implementation):
        impls = [obj.__attnbench__]  # type: ignore[attr-defined]
    else:
        raise PluginError(f"{origin} is neither a module nor a function decorated with @register")
    for impl in impls:
        registry.add(impl, origin, source)
    return len(impls)


def declared_in(module: ModuleType) -> list[Implementation]:
    """What ``module`` declares, in definition order: its functions decorated with ``@register``
    and the implementations it holds as attributes (``my_attention_mha = lift(my_attention)``).

    A decorated function another module defined and this one merely imports is not this
    module's declaration; an Implementation object reached twice is the same declaration.
    """
    found: list[Implementation] = []
    for value in list(vars(module).values()):
        if isinstance(value, Implementation):
            impl = value
        elif callable(value) and isinstance(getattr(value, "__attnbench__", None), Implementation):
            if getattr(value, "__module__", None) != module.__name__:
                continue
            impl = value.__attnbench__
        else:
            continue
        if not any(impl is seen for seen in found):
            found.append(impl)
    return found


def _import_file(path: Path) -> ModuleType:
    digest = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:8]
    module_name = f"attnbench_plugin_{path.stem}_{digest}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise PluginError(f"cannot import {path}: not a Python source file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[module_name]
        raise
    return module


ROOTED = "::"
"""``ROOT::MODULE``: a plugin module imported from the folder ROOT (one revision's checkout), ROOT first on sys.path."""


def _put_first(roots: Iterable[Path]) -> None:
    """``roots`` at the front of ``sys.path``, in order: a plugin's own package comes from its own checkout."""
    for root in reversed([str(r) for r in roots]):
        if root in sys.path:
            sys.path.remove(root)
        sys.path.insert(0, root)


def load_plugin(registry: Registry, spec: str) -> None:
    """Load ``--plugin SPEC``: a path to a .py file, an importable module name, or ``ROOT::MODULE``.

    A file's own folder and its git repository's root go first on ``sys.path`` (:func:`harness.runtime.provenance.import_roots`),
    so a plugin file that imports the package beside it works wherever the command runs."""
    path = Path(spec)
    rooted = ROOTED in spec and not spec.endswith(".py")
    is_file = not rooted and (spec.endswith(".py") or path.exists())
    origin = f"plugin file {path.resolve()}" if is_file else f"plugin module {spec}"
    before = set(sys.modules)
    roots: tuple[Path, ...] = ()
    try:
        if is_file:
            if not path.is_file():
                raise UsageError(f"--plugin {spec}: no such file; give a path to a .py file or a module name")
            roots = provenance.import_roots(path)
            _put_first(roots)
            module = _import_file(path)
        elif rooted:
            root, _, name = spec.partition(ROOTED)
            if not Path(root).is_dir():
                raise UsageError(f"--plugin {spec}: {root} is not a folder; write ROOT::MODULE with ROOT a checkout")
            roots = (Path(root).resolve(),)
            _put_first(roots)
            module = importlib.import_module(name)
        else:
            module = importlib.import_module(spec)
        provenance.note_import(absolute_specs([spec])[0], before, roots)
        if _collect(registry, module, origin, absolute_specs([spec])[0]) == 0:
            raise PluginError(f"{origin} registered no implementation; decorate a function with @harness.register")
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - a broken plugin must never take the others down
        registry.errors.append(LoadError(origin, _describe(exc), requested=True))


def _load_entry_point(registry: Registry, ep: metadata.EntryPoint) -> None:
    dist = getattr(ep.dist, "name", None) or "?"
    origin = f"entry point {ep.name} = {ep.value} (distribution {dist})"
    try:
        with plugin_state.kept():
            _collect(registry, ep.load(), origin, f"{ENTRY_POINT_SOURCE}{ep.name}={ep.value}")
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - recorded in full as this plugin's error; the others go on
        registry.errors.append(LoadError(origin, _describe(exc)))


def _load_entry_points(registry: Registry) -> set[str]:
    """Load the entry-point group; return the module names it covered."""
    covered: set[str] = set()
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        covered.add(ep.module)
        _load_entry_point(registry, ep)
    return covered


def _scan_builtins(registry: Registry, covered: set[str]) -> None:
    try:
        package = importlib.import_module(BUILTIN_PACKAGE)
    except Exception as exc:  # noqa: BLE001 - recorded in full as this plugin's error; the others go on
        registry.errors.append(LoadError(f"package {BUILTIN_PACKAGE}", _describe(exc)))
        return
    missing = [
        f"{BUILTIN_PACKAGE}.{info.name}" for info in pkgutil.iter_modules(package.__path__)
        if not info.name.startswith("_") and f"{BUILTIN_PACKAGE}.{info.name}" not in covered
    ]
    if missing and not covered:
        registry.notes.append(
            "attnbench's entry points are not installed (run `pip install -e .`); built-ins were found by "
            "scanning the implementations/ package"
        )
    for module_name in missing:
        try:
            with plugin_state.kept():
                _collect(registry, importlib.import_module(module_name), f"built-in module {module_name}", module_name)
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - recorded in full as this plugin's error; the others go on
            registry.errors.append(LoadError(f"built-in module {module_name}", _describe(exc)))


def absolute_specs(plugins: Iterable[str]) -> tuple[str, ...]:
    """``--plugin`` specs with file paths made absolute: worker processes and ``--resume`` load the
    same files whatever their working directory; module names stay as given."""
    return tuple(_absolute(p) for p in plugins)


def _absolute(spec: str) -> str:
    if ROOTED in spec and not spec.endswith(".py"):
        root, _, name = spec.partition(ROOTED)
        return f"{Path(root).resolve()}{ROOTED}{name}"
    return str(Path(spec).resolve()) if spec.endswith(".py") or Path(spec).exists() else spec


def load_registry(plugins: Iterable[str] = (), *, builtins: bool = True, entry_points: bool = True) -> Registry:
    """Build the registry: entry points, then built-ins not reached that way, then ``--plugin`` specs.

    What plugin modules print while they import goes to stderr: stdout is the command's answer.
    The process state each one changes at import is put back (:func:`harness.contract.plugin_state.kept`):
    the command's process must not carry it to the implementations it starts workers for.
    """
    registry = Registry()
    with plugin_state.stdout_to_stderr(), plugin_state.exits_refused(IMPORTING):
        covered = _load_entry_points(registry) if entry_points else set()
        if builtins:
            _scan_builtins(registry, covered)
        for spec in plugins:
            with plugin_state.kept():
                load_plugin(registry, spec)
    return registry


def load_source(source: str) -> Registry:
    """Only what one source declares (a spec from :attr:`Registry.sources`): what a worker loads, so that
    no other plugin's import runs in the process of the implementation it serves. A PluginError if it fails."""
    registry = Registry()
    with plugin_state.stdout_to_stderr(), plugin_state.exits_refused(IMPORTING):
        if source.startswith(ENTRY_POINT_SOURCE):
            name, _, value = source[len(ENTRY_POINT_SOURCE):].partition("=")
            _load_entry_point(registry, metadata.EntryPoint(name=name, value=value, group=ENTRY_POINT_GROUP))
        else:
            load_plugin(registry, source)
    if registry.errors:
        raise PluginError("; ".join(str(e) for e in registry.errors))
    return registry


_LOADED: dict[str, Registry] = {}


CONTENDER = "@"
"""Joins an implementation's name and a label in a contender's name (``flash@head``: ``attnbench ab`` times one
name from two checkouts in one run). A declared name is an identifier, so no plugin's name holds it."""


def load_implementation(source: str, name: str) -> Implementation:
    """In a worker: implementation ``name`` (or contender ``name@label``) from its source alone, loaded once per
    process."""
    if source not in _LOADED:
        _LOADED[source] = load_source(source)
    return _LOADED[source].get(name.partition(CONTENDER)[0])
