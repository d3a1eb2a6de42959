"""The code's own contracts, run with the tests so that CI enforces them: import-linter's layer and
no-cycle contracts, ruff, and mypy (configured in pyproject.toml; installed by the `test` extra)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _tool(name: str) -> str:
    path = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed; `bash scripts/setup.sh test` installs it (the `test` extra)")
    return path


@pytest.mark.parametrize("command", [["lint-imports", "--no-cache"], ["ruff", "check", "."], ["mypy"]], ids=lambda c: c[0])
def test_the_code_keeps_its_contracts(command: list[str]) -> None:
    run = subprocess.run([_tool(command[0]), *command[1:]], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, f"{' '.join(command)} failed:\n{run.stdout[-6000:]}\n{run.stderr[-2000:]}"


def test_mypy_catches_a_misspelled_capability_in_a_plugin(tmp_path: Path) -> None:
    """The contract is typed (harness ships py.typed): a typo in @register is a type error before any run."""
    plugin = tmp_path / "typo_plugin.py"
    plugin.write_text('from harness import register\n\n\n@register("typo", backend="torch", cuasal=True)\n'
                      'def typo(q, k, v, **kwargs):\n    return q\n')
    run = subprocess.run([_tool("mypy"), str(plugin)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 1 and 'Argument "cuasal" to "register"' in run.stdout, run.stdout + run.stderr
