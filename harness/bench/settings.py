"""What a bench run and an A/B comparison measure: the settings records the library reads.

Light to import (no torch), so that the command line takes its flags' defaults from these records
(:func:`harness.cli.common.default_of`) while ``attnbench --help`` still answers at once: each default is
written here, once. :mod:`harness.bench.runner` and :mod:`harness.bench.ab` re-export them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from harness.bench.timing import TimingConfig
from harness.results import Config

VALUE_PROBES = ("off", "one", "all")
"""``--value-probe``'s choices: no cell, one cell per implementation and mode, every cell."""


@dataclass
class BenchSettings:
    """Everything that decides what a run measures; stored as the result file's config."""

    suite: str = "quick"
    overrides: dict[str, list[Any]] = field(default_factory=dict)
    only: list[str] = field(default_factory=list)
    plugins: list[str] = field(default_factory=list)
    timeout_s: float = 300.0
    timing: TimingConfig = field(default_factory=TimingConfig)
    memory: bool = True
    memory_budget_bytes: float | None = None
    """Skip cells predicted to need more; None: half the RAM free when the run starts."""
    cell_budget_s: float | None = 20.0
    """None: cells are never skipped for time (the user named them on the command line)."""
    threads: int = 1
    device: str = "cpu"
    executor: str = "local"
    """"local" (worker processes here, one cell at a time) or "ray" (each cell a Ray task holding a whole node)."""
    address: str | None = None
    """The Ray cluster's address (None: the one ``ray start`` made on this machine)."""
    reference: str | None = None
    """The contender each other's per-round ratio divides by (None: torch_sdpa when timed, else the first)."""
    model: str | None = None
    """A catalogue model (``--model``, :mod:`harness.case.models`): its calls are the cells, instead of the suite's."""
    value_probe: str = "one"
    """Which cells the value probe times again under other distributions of their input values
    (:mod:`harness.bench.values`): "one" per implementation and mode, "all", or "off"."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_config(self) -> Config:
        """The result file's config: these settings in their own order (resume reads them back)."""
        return Config.from_json(self.to_dict())

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BenchSettings:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        known["timing"] = TimingConfig(**known.get("timing", {}))
        return cls(**known)


@dataclass(frozen=True)
class ABSettings:
    """What an A/B comparison measures; stored in both sides' result files."""

    base: str
    head: str
    suite: str = "quick"
    overrides: dict[str, list[Any]] = field(default_factory=dict)
    only: list[str] = field(default_factory=list)
    rounds: int = 20
    processes: int = 4
    """The pairs of worker processes (one base, one head) the rounds are spread over (:mod:`harness.bench.ab`)."""
    calls: int = 3
    """Timed calls per side per round (after one warm-up call): short rounds, so load changes hit both sides."""
    threads: int = 1
    device: str = "cpu"
    timeout_s: float = 300.0
    clock: str = "wall"
    """"wall" (elapsed time, the default) or "cpu" (process CPU time: steadier on a loaded machine, blind to waiting)."""
