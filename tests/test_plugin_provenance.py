"""A plugin file that imports the package beside it: found from any working directory, and recorded.

The result file records the plugin repository's commit (not attnbench's) and the packages the plugin
imported ("local" for its own checkout's). Two checkouts of one package load side by side only in
separate processes (what `attnbench ab` does); here one checkout is enough.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.contract.discovery import load_registry
from harness.results import ResultWriter, read_run
from harness.runtime.provenance import import_roots, plugin_provenance

PLUGIN = '''import {package}

from harness import register


@register("{name}", backend="numpy")
def {name}(q, k, v, *, causal=False, mask=None, scale=None):
    return {package}.identity(q)
'''


def _repo(root: Path, package: str, name: str, *, src_layout: bool = False) -> tuple[Path, str]:
    code = root / "src" if src_layout else root
    (code / package).mkdir(parents=True)
    (code / package / "__init__.py").write_text("def identity(x):\n    return x\n")
    plugin = root / "bench" / "plugin.py" if src_layout else root / "plugin.py"
    plugin.parent.mkdir(exist_ok=True)
    plugin.write_text(PLUGIN.format(package=package, name=name))
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@e"}
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "one"]):
        subprocess.run(["git", *args], cwd=root, check=True, env=env, capture_output=True)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, check=True, capture_output=True, text=True).stdout
    return plugin, commit.strip()


@pytest.mark.parametrize("src_layout", [False, True], ids=["package-beside", "src-layout"])
def test_a_plugin_imports_its_own_package_and_records_its_commit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 src_layout: bool) -> None:
    package = f"ownpkg_{'src' if src_layout else 'flat'}"
    plugin, commit = _repo(tmp_path / "repo", package, f"own_{package}", src_layout=src_layout)
    monkeypatch.chdir(tmp_path)  # not the repository: the import must not depend on the working directory
    monkeypatch.setattr(sys, "path", list(sys.path))
    registry = load_registry([str(plugin)], builtins=False, entry_points=False)
    assert not registry.errors, registry.errors
    assert f"own_{package}" in registry
    assert import_roots(plugin)[0] == plugin.parent.resolve()
    made = plugin_provenance([str(plugin.resolve())])
    assert made.plugin_commit == commit and made.plugin_packages == {package: "local"}
    out = tmp_path / "run.json"
    writer = ResultWriter(out, "bench", {"suite": "quick", "plugins": [str(plugin.resolve())]})
    writer.finish()
    writer.close()
    env = read_run(out).environment
    assert env.plugin_commit == commit and env.plugin_packages == {package: "local"}
    assert env.plugin_commits == {str(plugin.resolve()): commit}


def test_a_plugin_outside_any_repository_records_no_commit(tmp_path: Path) -> None:
    plugin = tmp_path / "loose.py"
    plugin.write_text("from harness import register\n")
    made = plugin_provenance([str(plugin)])
    assert made.plugin_commit is None and made.plugin_commits is None


def test_a_plugin_module_of_a_checkout_is_named_root_colon_colon_module(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    plugin, commit = _repo(tmp_path / "checkout", "rootedpkg", "rooted_impl")
    (tmp_path / "checkout" / "rootedpkg" / "attn.py").write_text(PLUGIN.format(package="rootedpkg", name="rooted_attn"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    spec = "checkout::rootedpkg.attn"
    registry = load_registry([spec], builtins=False, entry_points=False)
    assert not registry.errors and "rooted_attn" in registry
    absolute = registry.sources["rooted_attn"]
    assert absolute == f"{(tmp_path / 'checkout').resolve()}::rootedpkg.attn"
    assert plugin_provenance([absolute]).plugin_commit == commit
    missing = load_registry(["nowhere::rootedpkg.attn"], builtins=False, entry_points=False)
    assert missing.fatal_errors and "not a folder" in str(missing.fatal_errors[0])
