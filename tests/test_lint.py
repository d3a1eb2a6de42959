"""The code's own contracts, run with the tests so that CI enforces them: import-linter's layer and
no-cycle contracts, ruff, mypy (configured in pyproject.toml; installed by the `test` extra), and radon's
cyclomatic complexity (no function graded D or worse). Modules are cut by concept, not by a line count."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from radon.complexity import cc_rank, cc_visit

ROOT = Path(__file__).resolve().parent.parent


def _tool(name: str) -> str:
    path = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed; `bash scripts/setup.sh test` installs it (the `test` extra)")
    return path


@pytest.mark.parametrize("command", [["lint-imports", "--no-cache"], ["ruff", "check", "."],
                                     pytest.param(["mypy"], marks=pytest.mark.slow)],  # type checking: minutes, cold
                         ids=lambda c: c[0])
def test_the_code_keeps_its_contracts(command: list[str]) -> None:
    run = subprocess.run([_tool(command[0]), *command[1:]], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, f"{' '.join(command)} failed:\n{run.stdout[-6000:]}\n{run.stderr[-2000:]}"


@pytest.mark.slow
def test_mypy_catches_a_misspelled_capability_in_a_plugin(tmp_path: Path) -> None:
    """The contract is typed (harness ships py.typed): a typo in @register is a type error before any run."""
    plugin = tmp_path / "typo_plugin.py"
    plugin.write_text('from harness import register\n\n\n@register("typo", backend="torch", cuasal=True)\n'
                      'def typo(q, k, v, **kwargs):\n    return q\n')
    run = subprocess.run([_tool("mypy"), str(plugin)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 1 and 'Argument "cuasal" to "register"' in run.stdout, run.stdout + run.stderr


WORST_GRADE = "C"
"""radon's grade C is complexity 11-20: past it (D from 21) a function does several things; split it into named
steps or tables (a lookup table, a predicate with a name), not into anonymous pieces."""
ALLOWED: set[tuple[str, str]] = set()
"""(file, function) pairs graded past :data:`WORST_GRADE` for now. An entry no longer past it fails too, so the
set only shrinks."""


def _graded() -> list[tuple[str, str, int, str, int]]:
    """(file, function, line, grade, complexity) of every function, method and nested function in harness/ and
    implementations/*.py."""
    files = sorted([*(ROOT / "harness").rglob("*.py"), *(ROOT / "implementations").glob("*.py")])
    graded = []
    for path in files:
        blocks = list(cc_visit(path.read_text(), no_assert=False))
        while blocks:
            block = blocks.pop()
            blocks += getattr(block, "closures", [])
            graded.append((path.relative_to(ROOT).as_posix(), block.fullname, block.lineno, cc_rank(block.complexity),
                           block.complexity))
    return graded


def test_no_function_is_graded_d_or_worse_by_radon() -> None:
    graded = _graded()
    assert any(path == "harness/cli/run_cmd.py" and name == "run" for path, name, *_ in graded)  # it read the tree
    past = {(path, name): (line, grade, complexity) for path, name, line, grade, complexity in graded
            if grade > WORST_GRADE}
    new = [f"{path}:{line} {name} graded {grade} ({complexity})"
           for (path, name), (line, grade, complexity) in sorted(past.items()) if (path, name) not in ALLOWED]
    assert not new, f"radon grades these past {WORST_GRADE}; split them into named steps: " + "; ".join(new)
    fixed = sorted(f"{path} {name}" for path, name in ALLOWED - past.keys())
    assert not fixed, f"graded {WORST_GRADE} or better now: remove from ALLOWED in tests/test_lint.py: " + "; ".join(fixed)

