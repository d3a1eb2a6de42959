"""`--executor` and `--address` on verify, bench and run, where Ray is not needed to tell: no Ray
installed is exit 2 with the install command; an address without the Ray executor is exit 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

NO_RAY = "import sys; sys.modules['ray'] = None  # this interpreter cannot import ray, as where it is not installed\n"


@pytest.mark.parametrize("argv", [["verify", "--suite", "small", "--only", "numpy_naive", "--executor", "ray"],
                                  ["bench", "--only", "numpy_naive", "--T", "64", "--executor", "ray"],
                                  ["run", "--only", "numpy_naive", "--executor", "ray"]])
def test_without_ray_the_ray_executor_says_how_to_install_it(argv: list[str], tmp_path: Path) -> None:
    code = NO_RAY + f"from harness.cli import main\nsys.exit(main({argv!r}))\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    assert "pip install 'attnbench[ray]'" in out.stderr
    assert not list(tmp_path.rglob("*.json"))  # nothing was started, nothing written


def test_an_address_needs_the_ray_executor() -> None:
    from harness.cli import main

    assert main(["verify", "--only", "numpy_naive", "--address", "10.0.0.1:6379"]) == 2
