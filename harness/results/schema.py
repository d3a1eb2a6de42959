"""The result file's schema: frozen dataclasses that every writer builds and every reader gets.

One module owns the layout (as asv's ``Results`` and torch.utils.benchmark's ``Measurement``
do): a run document, bench cells, verify cells, a status enum and one cell key. JSON is only
the storage form: :meth:`Run.to_json` and :meth:`Run.from_json` convert, and ``from_json``
upgrades every version this attnbench reads.

Schema version 3 (written now)::

    {
      "schema": "attnbench.results", "schema_version": 3,
      "run_id": "...", "command": "bench" | "verify", "complete": bool,
      "environment": {...},          # machine, versions, command line, threads
      "config": {...},               # the command's settings (resume reads them back)
      "implementations": {...},      # bench: description, source and capabilities per implementation
      "peaks": {"float32/cpu": {"gflops", "first_gflops", "confirmed_gflops", "fastest_call_gflops", ...}},
      "bandwidth": {"cpu/threads=2": {"read_gbps", "copy_gbps", ...}},  # bench (optional in v2): memory roof
      "fits": [...] | null,          # bench: scaling fits of the finished run
      "coverage": {...} | null,      # verify: pairwise coverage per implementation
      "cells": [BenchCell | VerifyCell, ...]
    }

Cells are append-only: a cell never changes once written. Whatever is only known at the end
(the confirmed GEMM peak) lives in its own record, and a cell's share of it is computed on
reading (:meth:`Run.pct_peak`). Version 1 also stored ``pct_peak`` in each bench cell,
rewritten after the peak was confirmed; reading a v1 file drops it, since it equals what
:meth:`Run.pct_peak` computes from the v1 file's own peaks.

Version 3 adds, for cells run on a cluster (``--executor ray``), the node a cell ran on
(``node``: hostname, CPU model, cores, GPU, torch build, Ray node id and the ``kind`` label that
groups identical machines) and, for bench cells, when its task held the node (``started_at``,
``ended_at``: seconds since the epoch on that node's clock). They are written only when known,
so a local run's cells look as in version 2; every v1 and v2 file reads unchanged. A peak
measured on a cluster is keyed per node kind (``"float32/cpu@<kind>"``, :func:`peak_key`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, ClassVar

from harness.results.records import (
    Bandwidth,
    Config,
    Coverage,
    Environment,
    Integrity,
    Memory,
    Node,
    Peak,
    Record,
    Stats,
    coerce_optional,
)

SCHEMA = "attnbench.results"
SCHEMA_VERSION = 3
READABLE_VERSIONS = (1, 2, 3)


class Status(str, Enum):
    """A cell's outcome. A ``str`` enum: ``cell.status == "ok"`` holds, and JSON stores the word."""

    OK = "ok"            # bench: measured
    PASS = "pass"        # verify: within the rule
    FAIL = "fail"        # verify: outside the rule
    SKIPPED = "skipped"  # not run: the reason says why (capabilities, budget, availability)
    ERROR = "error"      # the implementation raised
    CRASH = "crash"      # its worker process died
    TIMEOUT = "timeout"  # its worker was stopped at the time limit
    IMPLAUSIBLE = "implausible"  # bench: faster than physics allows, or the worker's clock does not add up
    VIOLATION = "violation"  # bench: a timed call broke the rules (patched clock, wrapper result, work left running)
    WRONG = "wrong"      # bench: a timed call's output does not match float64 on its inputs

    def __str__(self) -> str:
        return self.value

    @property
    def is_problem(self) -> bool:
        """A result that fails a run: the implementation is wrong or broke."""
        return self in PROBLEMS


PROBLEMS = frozenset({Status.FAIL, Status.ERROR, Status.CRASH, Status.TIMEOUT, Status.IMPLAUSIBLE, Status.VIOLATION,
                      Status.WRONG})
INTEGRITY = frozenset({Status.IMPLAUSIBLE, Status.VIOLATION, Status.WRONG})
"""Bench statuses of a cell whose time is not backed by a verified computation (docs/integrity.md)."""


@dataclass(frozen=True, order=True)
class CellKey:
    """What a cell measured: a later cell with the same key replaces an earlier one; resume skips it."""

    type: str
    implementation: str
    case_id: str
    variant: str
    """bench: the mode (fwd, bwd, fwd+bwd); verify: the check (output, grad, property:NAME, fuzz)."""


@dataclass(frozen=True)
class BenchCell:
    """One (implementation, case, mode) timed, with its memory run."""

    type: ClassVar[str] = "bench"
    implementation: str
    case: Mapping[str, Any]
    case_id: str
    mode: str
    status: Status
    reason: str | None = None
    flops: float | None = None
    peak_key: str | None = None
    """Which record of ``Run.peaks`` this cell's % of peak divides by ("float32/cpu")."""
    samples_s: tuple[float, ...] = ()
    stats: Stats | None = None
    gflops: float | None = None
    memory: Memory | None = None
    threads: int | None = None
    seconds: float | None = None
    predicted_seconds: float | None = None
    load_average: float | None = None
    traceback: str | None = None
    setup_s: float | None = None
    """Seconds of set-up before the timed calls, in the timing worker: the inputs and the implementation's
    ``prepare`` (a compile, a block mask; a first cell may include a one-off build). Never timed in
    the samples. Absent in files from before it was recorded."""
    bytes: float | None = None
    """Compulsory bytes of one call (Q, K, V read once, O written once: :func:`harness.flops.compulsory_bytes`);
    None in files written without the bandwidth roofline (optional in v2)."""
    node: Node | None = None
    """Where the cell ran, on a cluster (None: the run's own machine, its ``environment``)."""
    started_at: float | None = None
    """Epoch seconds on the node when the cell's task started holding it (cluster runs)."""
    ended_at: float | None = None
    integrity: Integrity | None = None
    """What backs the cell's time (docs/integrity.md): the physics floor and its roofs, the input sets,
    the checked samples and their errors, the clock's accounting. Absent in files from before it."""
    profile: tuple[tuple[str, float], ...] | None = None
    """The top ATen operators of one profiled call, (name, share of the call's time); disclosure only."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "status", Status(self.status))  # "ok" given as a word is the same status
        # a record given as its stored form (a JSON object) is read as the record
        object.__setattr__(self, "stats", coerce_optional(Stats, self.stats))
        object.__setattr__(self, "memory", coerce_optional(Memory, self.memory))
        object.__setattr__(self, "node", coerce_optional(Node, self.node))
        object.__setattr__(self, "integrity", coerce_optional(Integrity, self.integrity))
        if self.profile is not None:
            object.__setattr__(self, "profile", tuple((str(n), float(s)) for n, s in self.profile))

    @property
    def key(self) -> CellKey:
        return CellKey("bench", self.implementation, self.case_id, self.mode)

    @property
    def gbps(self) -> float | None:
        """Compulsory bytes per median second, in GB/s (1e9 bytes); None when either is unknown."""
        median = self.median
        return None if not self.bytes or not median else self.bytes / median / 1e9

    @property
    def median(self) -> float | None:
        return None if self.stats is None else self.stats.median

    @property
    def peak_extra_bytes(self) -> float | None:
        return None if self.memory is None else self.memory.peak_extra_bytes


@dataclass(frozen=True)
class VerifyCell:
    """One check of one (implementation, case): output, grad, a property, or a fuzz search."""

    type: ClassVar[str] = "verify"
    implementation: str
    case: Mapping[str, Any] | None
    case_id: str
    check: str
    status: Status
    reason: str | None = None
    kind: str = "kernel"
    group: str = "-"
    metrics: Mapping[str, object] = field(default_factory=dict)
    seconds: float = 0.0
    node: Node | None = None
    """Where the check ran, on a cluster (None: the run's own machine, its ``environment``)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "status", Status(self.status))  # "ok" given as a word is the same status
        object.__setattr__(self, "node", coerce_optional(Node, self.node))

    @property
    def key(self) -> CellKey:
        return CellKey("verify", self.implementation, self.case_id, self.check)


Cell = BenchCell | VerifyCell


def node_kind(cell: Cell) -> str | None:
    """The kind of machine a cluster cell ran on (None for a cell of a local run)."""
    return None if cell.node is None else cell.node.kind


def peak_key(dtype: str, device: str, kind: str | None = None) -> str:
    """The key in a result file's ``peaks``: "float32/cpu", or per node kind "float32/cpu@<kind>"."""
    return f"{dtype}/{device}" if kind is None else f"{dtype}/{device}@{kind}"


def bandwidth_key(device: str, threads: int | None, kind: str | None = None) -> str:
    """The key in a result file's ``bandwidth``: "cpu/threads=2" (bandwidth depends on the threads
    reading), or per node kind "cpu/threads=2@<kind>"."""
    key = f"{device}/threads={threads if threads is not None else 'default'}"
    return key if kind is None else f"{key}@{kind}"


@dataclass(frozen=True)
class Run:
    """One result file."""

    run_id: str
    command: str
    complete: bool
    environment: Environment
    config: Config
    cells: tuple[Cell, ...] = ()
    implementations: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    peaks: Mapping[str, Peak] = field(default_factory=dict)
    fits: tuple[Mapping[str, Any], ...] | None = None
    coverage: Mapping[str, Coverage] | None = None
    schema_version: int = SCHEMA_VERSION
    bandwidth: Mapping[str, Bandwidth] | None = None
    """bench: measured memory bandwidth per "device/threads=N" (read_gbps, copy_gbps, ...); None in files that lack it."""

    def __post_init__(self) -> None:  # records given as their stored form (JSON objects) are read as records
        object.__setattr__(self, "environment", Environment.coerce(self.environment))
        object.__setattr__(self, "config", Config.coerce(self.config))
        object.__setattr__(self, "peaks", {k: Peak.coerce(v) for k, v in self.peaks.items()})
        if self.coverage is not None:
            object.__setattr__(self, "coverage", {k: Coverage.coerce(v) for k, v in self.coverage.items()})
        if self.bandwidth is not None:
            object.__setattr__(self, "bandwidth", {k: Bandwidth.coerce(v) for k, v in self.bandwidth.items()})

    def bench_cells(self) -> list[BenchCell]:
        return [c for c in self.cells if isinstance(c, BenchCell)]

    def verify_cells(self) -> list[VerifyCell]:
        return [c for c in self.cells if isinstance(c, VerifyCell)]

    def pct_peak(self, cell: BenchCell) -> float | None:
        """The cell's GFLOP/s as a percentage of its dtype's measured GEMM peak (None if either is missing)."""
        record = self.peaks.get(cell.peak_key or "")
        peak = None if record is None else record.gflops
        return None if not peak or cell.gflops is None else 100.0 * cell.gflops / peak

    def read_bandwidth(self, cell: BenchCell) -> float | None:
        """The read bandwidth (GB/s) measured for the cell's device and thread count, on its own kind of
        machine for a cluster cell (never another kind's), if any."""
        device = (cell.peak_key or "/cpu").split("@", 1)[0].split("/")[-1]
        record = (self.bandwidth or {}).get(bandwidth_key(device, cell.threads, node_kind(cell)))
        return None if record is None else record.read_gbps

    def pct_bandwidth(self, cell: BenchCell) -> float | None:
        """The cell's compulsory GB/s as a percentage of the measured read bandwidth (None if either is missing)."""
        roof, gbps = self.read_bandwidth(cell), cell.gbps
        return None if not roof or gbps is None else 100.0 * gbps / roof

    def to_json(self) -> dict[str, Any]:
        stored = self._to_json()
        if self.bandwidth is not None:  # appended: files without it read as before
            stored["bandwidth"] = {key: record.to_json() for key, record in self.bandwidth.items()}
        return stored

    def _to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA, "schema_version": SCHEMA_VERSION, "run_id": self.run_id, "command": self.command,
            "complete": self.complete, "environment": self.environment.to_json(),
            "config": self.config.to_json(), "implementations": dict(self.implementations),
            "peaks": {key: peak.to_json() for key, peak in self.peaks.items()},
            "fits": None if self.fits is None else list(self.fits),
            "coverage": None if self.coverage is None else {name: c.to_json() for name, c in self.coverage.items()},
            "cells": [cell_to_json(c) for c in self.cells],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Run:
        """A run from its stored form, any readable version (the caller has checked ``schema``)."""
        version = data.get("schema_version")
        if version not in READABLE_VERSIONS:
            raise ValueError(f"schema_version {version!r}; this attnbench reads {READABLE_VERSIONS}")
        return cls(
            run_id=str(data.get("run_id", "")), command=str(data.get("command", "")),
            complete=bool(data.get("complete")), environment=Environment.from_json(data.get("environment") or {}),
            config=Config.from_json(data.get("config") or {}), cells=tuple(cell_from_json(c) for c in data.get("cells") or ()),
            implementations=data.get("implementations") or {},
            peaks={key: Peak.from_json(peak) for key, peak in (data.get("peaks") or {}).items()},
            fits=None if data.get("fits") is None else tuple(data["fits"]),
            coverage=None if data.get("coverage") is None
            else {name: Coverage.from_json(c) for name, c in data["coverage"].items()}, schema_version=int(version),
            bandwidth=None if data.get("bandwidth") is None
            else {key: Bandwidth.from_json(record) for key, record in data["bandwidth"].items()},
        )


_WHEN_KNOWN = {"node", "started_at", "ended_at", "integrity", "profile"}  # absent when unknown: older cells read as before


def cell_to_json(cell: Cell) -> dict[str, Any]:
    stored: dict[str, Any] = {"type": cell.type}
    for f in dataclasses.fields(cell):
        value = getattr(cell, f.name)
        if value is None and f.name in _WHEN_KNOWN:
            continue
        if f.name == "profile":
            value = [list(pair) for pair in value]
        stored[f.name] = (value.value if isinstance(value, Status) else list(value) if isinstance(value, tuple)
                          else value.to_json() if isinstance(value, Record) else value)
    return stored


_FIELDS = {kind.type: {f.name for f in dataclasses.fields(kind)} for kind in (BenchCell, VerifyCell)}
_DROPPED = {"pct_peak"}  # v1 bench cells: now computed from the run's peaks record


def cell_from_json(data: Mapping[str, Any]) -> Cell:
    """A cell from its stored form; an unknown type or field is an error that names it."""
    kind: type[BenchCell] | type[VerifyCell]
    kind = {"bench": BenchCell, "verify": VerifyCell}.get(str(data.get("type")))  # type: ignore[assignment]
    if kind is None:
        raise ValueError(f"a cell of unknown type {data.get('type')!r} (expected 'bench' or 'verify')")
    unknown = set(data) - _FIELDS[kind.type] - _DROPPED - {"type"}
    if unknown:
        raise ValueError(f"a {kind.type} cell with unknown field(s) {sorted(unknown)}")
    values = {k: v for k, v in data.items() if k in _FIELDS[kind.type]}
    values["status"] = Status(values["status"])
    if "samples_s" in values:
        values["samples_s"] = tuple(values["samples_s"] or ())
    return kind(**values)


def with_(cell: Cell, **changes: Any) -> Cell:
    """A copy of ``cell`` with ``changes`` (cells are frozen: a writer builds, never mutates)."""
    return dataclasses.replace(cell, **changes)


def problems(cells: Sequence[Cell]) -> list[Cell]:
    return [c for c in cells if c.status.is_problem]
