"""A result file is created as any file is (0666 less the umask) and a rewrite keeps an existing file's mode."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from result_documents import bench_document

from harness.results import ResultWriter
from harness.results.files import write_json_atomic


@pytest.fixture
def umask_027() -> Iterator[None]:
    previous = os.umask(0o027)
    try:
        yield
    finally:
        os.umask(previous)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_new_result_file_follows_the_umask(tmp_path: Path, umask_027: None) -> None:
    writer = ResultWriter(tmp_path / "run.json", "bench", {"suite": "quick"})
    writer.finish()
    assert _mode(tmp_path / "run.json") == 0o640
    write_json_atomic(tmp_path / "other.json", {"a": 1})
    assert _mode(tmp_path / "other.json") == 0o640


@pytest.mark.parametrize("mode", [0o644, 0o600, 0o664])
def test_a_rewrite_keeps_the_files_mode(tmp_path: Path, umask_027: None, mode: int) -> None:
    path = tmp_path / "run.json"
    write_json_atomic(path, bench_document())
    path.chmod(mode)
    writer = ResultWriter(path, "bench", {"suite": "quick"}, resume=True)
    writer.finish()
    assert _mode(path) == mode


def test_in_a_real_process_under_umask_002(tmp_path: Path) -> None:
    script = ("import os, sys; os.umask(0o002); from harness.results.files import write_json_atomic; "
              "write_json_atomic(sys.argv[1], {'a': 1})")
    subprocess.run([sys.executable, "-c", script, str(tmp_path / "x.json")], check=True, timeout=120)
    assert _mode(tmp_path / "x.json") == 0o664
