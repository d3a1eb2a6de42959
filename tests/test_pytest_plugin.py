"""The conformance suite as a pytest plugin, for real: attnbench pip-installed into a temporary
target, a plugin file in a temporary directory outside the repository, ``pytest --attnbench-plugin``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BOUND_S = 900  # a bound on a hang, not a speed expectation

KERNELS = '''
import torch
from harness import register


@register("my_attention", backend="torch", dtypes=("float32",), causal=True, mask=True)
def my_attention(q, k, v, *, causal=False, mask=None, scale=None):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, scale=scale)


@register("my_unscaled", backend="torch", dtypes=("float32",), causal=True, mask=True)
def my_unscaled(q, k, v, *, causal=False, mask=None, scale=None):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, scale=1.0)
'''


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """attnbench built and installed (no dependencies: they are this interpreter's) into a target
    directory, from a copy of the sources so the build leaves nothing in the repository."""
    root = tmp_path_factory.mktemp("install")
    source = root / "src"
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
    for name in ("harness", "implementations"):
        shutil.copytree(REPO / name, source / name, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    target = root / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps",
                    "--no-build-isolation", "--target", str(target), str(source)],
                   check=True, capture_output=True, text=True, timeout=BOUND_S)
    return target


def _pytest_in(workdir: Path, site: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "PYTHONPATH")}
    env["PYTHONPATH"] = str(site)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
                          cwd=workdir, env=env, capture_output=True, text=True, timeout=BOUND_S)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "my_kernel.py").write_text(KERNELS)
    return tmp_path


@pytest.mark.slow
def test_installed_attnbench_is_the_one_imported(installed: Path, workdir: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(installed)}
    out = subprocess.run([sys.executable, "-c", "import harness.conformance as c; print(c.__file__)"],
                         cwd=workdir, env=env, capture_output=True, text=True, timeout=BOUND_S, check=True)
    assert Path(out.stdout.strip()).is_relative_to(installed)


@pytest.mark.slow
def test_a_correct_plugin_passes_the_conformance_suite_in_any_directory(installed: Path, workdir: Path) -> None:
    out = _pytest_in(workdir, installed, "--attnbench-plugin", "my_kernel.py", "--attnbench-only", "my_attention")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert " passed" in out.stdout and "failed" not in out.stdout
    assert "my_attention-B1-H2-T13x61-d32-float32-causal" in _pytest_in(
        workdir, installed, "--attnbench-plugin", "my_kernel.py", "--attnbench-only", "my_attention", "--collect-only").stdout


@pytest.mark.slow
def test_a_wrong_plugin_fails_with_the_reason(installed: Path, workdir: Path) -> None:
    out = _pytest_in(workdir, installed, "--attnbench-plugin", "my_kernel.py", "--attnbench-only", "my_unscaled")
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr[-2000:]
    assert "test_conforms[my_unscaled-" in out.stdout and "output max|err|" in out.stdout


@pytest.mark.slow
def test_a_plugin_that_does_not_load_is_a_usage_error_naming_it(installed: Path, workdir: Path) -> None:
    (workdir / "bad.py").write_text("from harness import register\n\n@register('bad', backend='torch')\ndef bad(q, k, v):\n    return q\n")
    out = _pytest_in(workdir, installed, "--attnbench-plugin", "bad.py")
    assert out.returncode == 4, out.stdout[-2000:] + out.stderr[-2000:]
    assert "bad.py" in out.stderr and "has no parameter" in out.stderr
    missing = _pytest_in(workdir, installed, "--attnbench-plugin", "nowhere.py")
    assert missing.returncode == 4 and "--attnbench-plugin nowhere.py" in missing.stderr


def test_without_attnbench_options_a_session_collects_nothing_of_ours(tmp_path: Path) -> None:
    """pytest loads the plugin in every session of a user who installed attnbench: it must add no tests."""
    (tmp_path / "test_theirs.py").write_text("def test_theirs():\n    assert True\n")
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=BOUND_S)
    assert out.returncode == 0 and "1 passed" in out.stdout, out.stdout + out.stderr
