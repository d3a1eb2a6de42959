"""Fixtures every test directory shares: the real ``attnbench`` command in a child process.

A test of the command runs it as a user does (``python -m harness ...``, the tree under test first on
``PYTHONPATH`` as the caller set it), never a copy of ``main`` in the test's own process: exit codes,
signals, pipes and ``sys.exit`` paths are part of what is tested. One runner serves every such test, so
a change to how the command starts (an environment variable, a bound) is made once.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

BOUND_S = 300.0
"""The longest a command may take before its test fails: a bound for a hang, never a timing assumption."""


@dataclass(frozen=True)
class Cli:
    """``attnbench`` as a child process: :meth:`__call__` runs it to the end, :meth:`start` leaves it running."""

    executable: str = sys.executable

    def argv(self, *args: str, prefix: Sequence[str] = ()) -> list[str]:
        """The command line: ``prefix`` (``nohup``) before ``python -m harness ARGS``."""
        return [*prefix, self.executable, "-m", "harness", *args]

    @staticmethod
    def env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """This process's environment, unbuffered output (a test reads lines as they come), with ``extra``."""
        return {**os.environ, "PYTHONUNBUFFERED": "1", **(extra or {})}

    def __call__(self, *args: str, env: Mapping[str, str] | None = None, timeout: float = BOUND_S,
                 cwd: Path | None = None, preexec_fn: Callable[[], None] | None = None, pass_fds: Sequence[int] = ()
                 ) -> subprocess.CompletedProcess[str]:
        """Run to the end, output captured (``pass_fds``: descriptors it inherits besides the standard three); a run
        past ``timeout`` fails the test naming the command."""
        try:
            return subprocess.run(self.argv(*args), capture_output=True, text=True, timeout=timeout, cwd=cwd,
                                  env=self.env(env), preexec_fn=preexec_fn, pass_fds=pass_fds)
        except subprocess.TimeoutExpired:
            pytest.fail(f"attnbench {' '.join(args[:2])} did not end within {timeout:g} s (a hang, or a pipe held open)")

    def start(self, *args: str, env: Mapping[str, str] | None = None, cwd: Path | None = None,
              prefix: Sequence[str] = (), new_session: bool = False) -> subprocess.Popen[str]:
        """Start and return at once (a test that signals it, or waits on a gate), output captured;
        ``new_session``: in a process group of its own, as a terminal's foreground job is."""
        return subprocess.Popen(self.argv(*args, prefix=prefix), cwd=cwd, env=self.env(env), text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=new_session)

    def outcome(self, *args: str, **options: Any) -> tuple[int, str, str]:
        """(exit code, stdout, stderr) of :meth:`__call__`: for a test that unpacks them."""
        done = self(*args, **options)
        return done.returncode, done.stdout, done.stderr


@pytest.fixture(scope="session")
def attnbench() -> Cli:
    """The ``attnbench`` command (session-wide: it holds no state, and module fixtures may run it)."""
    return Cli()


@pytest.fixture
def one_thread() -> Iterator[None]:
    """One torch thread for the test, as verify's workers run (many small problems: a thread pool costs more
    than it gains, 5x on a loaded 2-core machine); the count before is put back after."""
    import torch  # here, not at the top: the command's tests never import torch in this process

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


SHARD = re.compile(r"[\[-](shard\d+)[\]-]")
"""A test parametrised by a ``shardN`` id (``test_x[shard1-name]``): its shard is a work unit of its own."""


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Test processes take a file's tests together (``--dist=loadfile``: its module fixtures are built once),
    except a file's parametrised shards, which they take one shard each: a file whose one expensive fixture
    is parametrised over shards (tests/verifier/test_verifier.py's verify runs) shares that work between
    processes without a copy of the file per shard."""
    if config.getoption("dist", "no") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class ShardedFileScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            scope = super()._split_scope(nodeid)
            shard = SHARD.search(nodeid)
            return scope if shard is None else f"{scope}::{shard.group(1)}"

    return ShardedFileScheduling(config, log)
