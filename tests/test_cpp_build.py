"""tiled_fused's build helper: a builder killed mid-build does not make every later build wait forever."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # compiles, CLI subprocesses or whole verify runs: not in the inner loop

SOURCE = """
#include <pybind11/pybind11.h>
int answer() { return 42; }
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("answer", &answer); }
"""
"""The smallest extension the build helper makes (pybind11 alone: torch's own headers would take most of a
minute to compile on a busy 2-core machine, and the helper's locking and naming do not depend on them)."""


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


def _build_in_subprocess(source: Path, build_dir: Path) -> str:
    script = textwrap.dedent(f"""
        from pathlib import Path
        from implementations._cpp_build import build
        module = build([Path({str(source)!r})], "attnbench_tiny_copy_test", [], build_directory=Path({str(build_dir)!r}))
        print(module if isinstance(module, str) else module.answer())
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600,
                          cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.slow
def test_a_copy_of_the_same_sources_elsewhere_reuses_the_build(tmp_path: Path) -> None:
    """Ray unpacks the package to a new directory per cluster session: identical sources must not rebuild."""
    from implementations._cpp_build import extension_name

    first, second = tmp_path / "checkout" / "tiny.cpp", tmp_path / "ray_copy" / "tiny.cpp"
    for path in (first, second):
        path.parent.mkdir()
        path.write_text(SOURCE)
    assert extension_name("tiny", "avx2", [first]) == extension_name("tiny", "avx2", [second])
    (second.parent / "tiny.cpp").write_text(SOURCE + "// changed\n")
    assert extension_name("tiny", "avx2", [first]) != extension_name("tiny", "avx2", [second])
    second.write_text(SOURCE)
    assert extension_name("tiny", "avx2", [first], ["-fopenmp"]) != extension_name("tiny", "avx2", [first])

    build_dir = tmp_path / "build"
    assert _build_in_subprocess(first, build_dir) == "42"
    built = {p.name: p.stat().st_mtime_ns for p in build_dir.glob("*.so")}
    assert built
    assert _build_in_subprocess(second, build_dir) == "42"
    assert {p.name: p.stat().st_mtime_ns for p in build_dir.glob("*.so")} == built  # loaded, not rebuilt


def test_the_name_follows_the_headers_a_source_includes_and_no_others(tmp_path: Path) -> None:
    """A kernel's header (included transitively) changes the names of the extensions that include it
    only: editing the AVX2 kernels' header must not rebuild the AVX-512 extension."""
    from implementations._cpp_build import extension_name

    source = tmp_path / "tiny.cpp"
    source.write_text('#include "_flash_used.h"\n' + SOURCE)
    (tmp_path / "_flash_used.h").write_text('#pragma once\n#include "_flash_deep.h"\n')
    (tmp_path / "_flash_deep.h").write_text("#pragma once\n")
    (tmp_path / "_flash_other.h").write_text("#pragma once\n")
    before = extension_name("tiny", "avx2", [source])
    (tmp_path / "_flash_other.h").write_text("#pragma once\n// changed\n")
    assert extension_name("tiny", "avx2", [source]) == before
    (tmp_path / "_flash_deep.h").write_text("#pragma once\n// changed\n")
    assert extension_name("tiny", "avx2", [source]) != before
