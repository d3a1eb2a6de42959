"""Where cases and cells run: worker processes on this machine, or Ray tasks on a cluster.

The choice is made once, by :func:`open_executor`, from ``--executor`` and ``--address``. A run
(bench's cells, verify's cases) hands the executor a :class:`Job` that says how to do its work in
both places; the executor picks one. So the runners hold no cluster handle and test no flag, and a
third executor (a job queue, say) is a new class here and a new method on :class:`Job`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Protocol

from harness.errors import UsageError

if TYPE_CHECKING:
    from harness.runtime.cluster.connect import RayCluster

EXECUTORS = ("local", "ray")


class Job(Protocol):
    """A run's work, doable here or on a cluster; results are written as they arrive either way."""

    def run_here(self) -> None:
        """In isolated worker processes on this machine."""

    def run_on(self, cluster: RayCluster) -> None:
        """As Ray tasks on ``cluster``, connected and holding this run's code."""


class Executor(ABC):
    """Runs a :class:`Job` in one place."""

    name: ClassVar[str]

    @abstractmethod
    def execute(self, job: Job) -> None: ...


@dataclass(frozen=True)
class LocalExecutor(Executor):
    """Worker processes on this machine (the default)."""

    name: ClassVar[str] = "local"

    def execute(self, job: Job) -> None:
        job.run_here()


@dataclass(frozen=True)
class RayExecutor(Executor):
    """Every case or cell a Ray task on a connected cluster."""

    cluster: RayCluster
    name: ClassVar[str] = "ray"

    def execute(self, job: Job) -> None:
        job.run_on(self.cluster)


@contextmanager
def open_executor(kind: str, address: str | None, plugins: Sequence[str]) -> Iterator[Executor]:
    """The executor ``kind`` names, ready to use; a Ray cluster is connected (a bad address fails here,
    before any result file is touched) and disconnected on leaving."""
    if kind == "local":
        yield LocalExecutor()
        return
    if kind != "ray":
        raise UsageError(f"unknown executor {kind!r}: choose one of {', '.join(EXECUTORS)}")
    from harness.runtime.cluster.connect import connect

    with connect(address, tuple(plugins)) as cluster:
        yield RayExecutor(cluster)
