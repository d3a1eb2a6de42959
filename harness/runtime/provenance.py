"""Where a plugin's code came from: its repository's commit and the packages it imported.

A result file must say which revision of a plugin it measured. attnbench's own commit says
nothing about that (a plugin repository's history would read "62d05f9, 62d05f9"), so the commit
recorded is that of the git repository holding the plugin file, and the packages are those the
plugin's import brought into the process, with their installed versions ("local" for a package
imported from the plugin's own repository rather than an installed distribution).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

_IMPORTED: dict[str, tuple[str, ...]] = {}
"""Plugin spec -> top-level modules its import added to ``sys.modules`` (this process only)."""
_ROOTS: dict[str, tuple[Path, ...]] = {}


def git_commit(path: Path) -> str | None:
    """The HEAD commit of the git repository holding ``path`` (a file or a folder); None outside one."""
    folder = path if path.is_dir() else path.parent
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5, cwd=folder)
    except (OSError, subprocess.SubprocessError):
        return None
    return (out.stdout.strip() or None) if out.returncode == 0 else None


def git_root(path: Path) -> Path | None:
    """The top folder of the git work tree holding ``path``; None outside one."""
    folder = path if path.is_dir() else path.parent
    try:
        out = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True, timeout=5,
                             cwd=folder)
    except (OSError, subprocess.SubprocessError):
        return None
    return Path(out.stdout.strip()) if out.returncode == 0 and out.stdout.strip() else None


def import_roots(plugin_file: Path) -> tuple[Path, ...]:
    """The folders a plugin file's own imports resolve from, first first: its own folder, then its
    repository's root and that root's ``src`` (a src layout), so ``import mypkg`` finds the package
    of the same checkout as the file, never another revision's or an installed copy."""
    folder = plugin_file.resolve().parent
    roots = [folder]
    top = git_root(folder)
    if top is not None:
        roots += [top, top / "src"]
    return tuple(dict.fromkeys(r for r in roots if r.is_dir()))


def note_import(spec: str, before: Iterable[str], roots: tuple[Path, ...] = ()) -> None:
    """Record the top-level modules that loading ``spec`` added (``before``: ``sys.modules`` before it)."""
    seen = {name.partition(".")[0] for name in before}
    added = {name.partition(".")[0] for name in list(sys.modules)} - seen
    if spec in _IMPORTED and not added:
        return  # loaded again from the module cache: what the first import brought stays the answer
    _IMPORTED[spec] = tuple(sorted(n for n in added if not n.startswith(("attnbench_plugin_", "_"))))
    _ROOTS[spec] = roots


def _version(module: str, roots: tuple[Path, ...]) -> str | None:
    loaded = sys.modules.get(module)
    where = getattr(loaded, "__file__", None)
    if where and any(Path(where).resolve().is_relative_to(r) for r in roots):
        return "local"  # the plugin's own package, from its checkout
    names = metadata.packages_distributions().get(module, [])
    for name in names:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def imported_packages(specs: Iterable[str]) -> dict[str, str]:
    """Package -> version (or "local") of what the plugins ``specs`` imported here; stdlib modules left out."""
    out: dict[str, str] = {}
    for spec in specs:
        roots = _ROOTS.get(spec, ())
        for module in _IMPORTED.get(spec, ()):
            if module in sys.stdlib_module_names:
                continue
            version = _version(module, roots)
            if version is not None:
                out[module] = version
    return out


@dataclass(frozen=True)
class Provenance:
    """The environment fields a result file records for its plugins (picklable: a worker sends it)."""

    plugin_commit: str | None = None
    """The first plugin's repository commit: the revision a history follows."""
    plugin_commits: Mapping[str, str] | None = None
    plugin_packages: Mapping[str, str] | None = None


def _root_of(spec: str) -> Path | None:
    if spec.endswith(".py"):
        return Path(spec).resolve()
    if "::" in spec:
        return Path(spec.partition("::")[0]).resolve()
    return None


def plugin_provenance(specs: Iterable[str]) -> Provenance:
    """Each plugin file's (or ``ROOT::MODULE``'s) repository commit, and the packages the plugins imported here."""
    specs = list(specs)
    commits = {spec: c for spec in specs if (root := _root_of(spec)) is not None and (c := git_commit(root)) is not None}
    packages = imported_packages(specs)
    return Provenance(plugin_commit=next(iter(commits.values()), None), plugin_commits=commits or None,
                      plugin_packages=packages or None)
