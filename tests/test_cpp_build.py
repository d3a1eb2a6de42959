"""tiled_fused's build helper: a builder killed mid-build does not make every later build wait forever."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SOURCE = """
#include <torch/extension.h>
int answer() { return 42; }
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("answer", &answer); }
"""


@pytest.mark.slow
def test_a_stale_lock_left_by_a_killed_builder_does_not_block_the_next_build(tmp_path: Path) -> None:
    source = tmp_path / "tiny.cpp"
    source.write_text(SOURCE)
    build_dir = tmp_path / "build"
    build_dir.mkdir()
    (build_dir / "lock").touch()  # what torch's FileBaton leaves when its builder is SIGKILLed
    script = textwrap.dedent(f"""
        from pathlib import Path
        from implementations._cpp_build import build
        module = build(Path({str(source)!r}), "attnbench_tiny_lock_test", [], build_directory=Path({str(build_dir)!r}))
        print(module if isinstance(module, str) else module.answer())
    """)
    # Without the builder's flock this waits for the stale lock forever: the timeout turns that into a failure.
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600,
                          cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "42", done.stdout
    assert not (build_dir / "lock").exists()
