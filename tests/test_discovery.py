"""Discovery for real: a plugin file, a broken plugin, a name clash, and an installed entry point."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harness.contract.discovery import load_registry

pytestmark = pytest.mark.slow  # subprocesses and workers that import torch: not in the inner loop

PLUGIN = textwrap.dedent('''
    import numpy as np
    from harness import register

    @register("{name}", backend="numpy", dtypes=("float32",), causal=False)
    def attention(q, k, v, *, causal=False, mask=None, scale=None):
        s = q @ np.swapaxes(k, -1, -2) * (scale or 1.0 / q.shape[-1] ** 0.5)
        p = np.exp(s - s.max(-1, keepdims=True))
        return (p / p.sum(-1, keepdims=True)) @ v
''')


def test_plugin_file_outside_repo_shows_in_list(tmp_path: Path, attnbench) -> None:
    plugin = tmp_path / "my_plugin.py"
    plugin.write_text(PLUGIN.format(name="my_outside_attention"))
    result = attnbench("list", "--json", "--plugin", str(plugin))
    assert result.returncode == 0, result.stderr
    entries = {e["name"]: e for e in json.loads(result.stdout)["implementations"]}
    assert entries["my_outside_attention"]["available"] is True
    assert str(plugin) in entries["my_outside_attention"]["source"]
    assert "numpy_naive" in entries


def test_broken_plugin_is_reported_and_others_still_load(tmp_path: Path, attnbench) -> None:
    broken = tmp_path / "broken_plugin.py"
    broken.write_text("import numpy\nraise RuntimeError('boom at import')\n")
    registry = load_registry([str(broken)])
    assert "numpy_naive" in registry and "torch_sdpa" in registry
    [error] = registry.errors
    assert str(broken) in error.source and "RuntimeError: boom at import" in error.error
    result = attnbench("list", "--plugin", str(broken))
    assert result.returncode == 2
    assert "boom at import" in result.stderr and str(broken) in result.stderr


def test_bad_keyword_error_names_plugin_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad_keyword.py"
    bad.write_text(PLUGIN.format(name="kw").replace("causal=False)", "causal=False, casual=True)"))
    registry = load_registry([str(bad)])
    [error] = registry.errors
    assert "unknown keyword(s) ['casual']" in error.error and str(bad) in error.error


def test_two_plugins_with_one_name_names_both_sources(tmp_path: Path) -> None:
    first, second = tmp_path / "first.py", tmp_path / "second.py"
    first.write_text(PLUGIN.format(name="same_name"))
    second.write_text(PLUGIN.format(name="same_name"))
    registry = load_registry([str(first), str(second)])
    [error] = registry.errors
    assert str(first) in error.error and str(second) in error.error and "same_name" in error.error
    assert registry.fatal_errors == [error]


def test_a_plugin_reusing_a_builtin_name_is_an_error_naming_both_sources(tmp_path: Path, attnbench) -> None:
    impostor = tmp_path / "impostor.py"
    impostor.write_text(PLUGIN.format(name="numpy_naive"))
    for command in (["list"], ["verify", "--only", "numpy_naive", "--suite", "small"]):
        result = attnbench(*command, "--plugin", str(impostor))
        assert result.returncode == 2, result.stdout + result.stderr
        assert "two implementations are named 'numpy_naive'" in result.stderr
        assert str(impostor) in result.stderr and "numpy_naive.py" in result.stderr
        assert "could not load" not in result.stderr and "all passed" not in result.stdout


def test_plugin_module_name_and_missing_file(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "plugin_as_module.py").write_text(PLUGIN.format(name="by_module_name"))
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "by_module_name" in load_registry(["plugin_as_module"])
    registry = load_registry([str(tmp_path / "nope.py")])
    assert "no such file" in registry.errors[0].error


def test_installed_package_entry_point_shows_in_list(tmp_path: Path, attnbench) -> None:
    package = tmp_path / "src"
    (package / "thirdparty_attn").mkdir(parents=True)
    (package / "thirdparty_attn" / "__init__.py").write_text(PLUGIN.format(name="thirdparty_attention"))
    (package / "pyproject.toml").write_text(textwrap.dedent('''
        [build-system]
        requires = ["setuptools>=64"]
        build-backend = "setuptools.build_meta"
        [project]
        name = "thirdparty-attn"
        version = "0.0.1"
        [project.entry-points."attnbench.implementations"]
        thirdparty = "thirdparty_attn"
        [tool.setuptools]
        packages = ["thirdparty_attn"]
    '''))
    target = tmp_path / "site"
    install = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index",
         "--target", str(target), str(package)], capture_output=True, text=True, timeout=300)
    assert install.returncode == 0, install.stderr
    pythonpath = os.pathsep.join([str(target), os.environ.get("PYTHONPATH", "")])
    result = attnbench("list", "--json", env={"PYTHONPATH": pythonpath})
    assert result.returncode == 0, result.stderr
    entries = {e["name"]: e for e in json.loads(result.stdout)["implementations"]}
    assert "thirdparty_attention" in entries and "numpy_naive" in entries
    assert "thirdparty_attn" in entries["thirdparty_attention"]["source"]
