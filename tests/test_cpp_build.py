"""tiled_fused's build helper: a builder killed mid-build does not make every later build wait forever."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from dataclasses import dataclass
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


def _build_in_subprocess(sources: Path | list[Path], build_dir: Path) -> str:
    """The build helper in a fresh process (as a command, or a Ray node, starts it), given ``sources`` as it takes
    them (one path, or a list): the extension's answer, or the helper's reason."""
    spelled = (f"Path({str(sources)!r})" if isinstance(sources, Path)
               else "[" + ", ".join(f"Path({str(p)!r})" for p in sources) + "]")
    script = textwrap.dedent(f"""
        from pathlib import Path
        from implementations._cpp_build import build
        module = build({spelled}, "attnbench_tiny_test", [], build_directory=Path({str(build_dir)!r}))
        print(module if isinstance(module, str) else module.answer())
    """)
    # Without the builder's flock a stale lock is waited on forever: the timeout turns that into a failure.
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600,
                          cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@dataclass(frozen=True)
class Built:
    answer: str
    """What the build helper gave: the extension's answer, or its reason."""
    so: dict[str, int]
    """The files it built: name -> mtime (ns)."""
    build_dir: Path
    first: Path
    """The source it built: the checkout's copy."""
    second: Path
    """The same source elsewhere (as a Ray node unpacks it)."""


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """The one compile of this module: the tiny extension built from a checkout's copy of its source, into a build
    directory where a builder killed mid-build left torch's ``lock``."""
    tmp = tmp_path_factory.mktemp("cpp")
    first, second = tmp / "checkout" / "tiny.cpp", tmp / "ray_copy" / "tiny.cpp"
    for path in (first, second):
        path.parent.mkdir()
        path.write_text(SOURCE)
    build_dir = tmp / "build"
    build_dir.mkdir()
    (build_dir / "lock").touch()  # what torch's FileBaton leaves when its builder is SIGKILLed
    answer = _build_in_subprocess(first, build_dir)
    return Built(answer, {p.name: p.stat().st_mtime_ns for p in build_dir.glob("*.so")}, build_dir, first, second)


@pytest.mark.slow
def test_a_stale_lock_left_by_a_killed_builder_does_not_block_the_next_build(built: Built) -> None:
    assert built.answer == "42", built.answer
    assert not (built.build_dir / "lock").exists()


@pytest.mark.slow
def test_a_copy_of_the_same_sources_elsewhere_reuses_the_build(built: Built) -> None:
    """Ray unpacks the package to a new directory per cluster session: identical sources must not rebuild."""
    from implementations._cpp_build import extension_name

    first, second = built.first, built.second
    assert extension_name("tiny", "avx2", [first]) == extension_name("tiny", "avx2", [second])
    second.write_text(SOURCE + "// changed\n")
    assert extension_name("tiny", "avx2", [first]) != extension_name("tiny", "avx2", [second])
    second.write_text(SOURCE)
    assert extension_name("tiny", "avx2", [first], ["-fopenmp"]) != extension_name("tiny", "avx2", [first])

    assert built.answer == "42" and built.so  # the checkout's build
    assert _build_in_subprocess([second], built.build_dir) == "42"
    assert {p.name: p.stat().st_mtime_ns for p in built.build_dir.glob("*.so")} == built.so  # loaded, not rebuilt


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
