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
      "coverage": {...} | null,      # verify: pairwise coverage per implementation
      "cells": [BenchCell | VerifyCell, ...]
    }

Files written by older versions may also hold ``fits`` (the cost-model fits of the finished run): a derived
value, read past and never written back (:data:`LEGACY_KEYS`); every fit is derived from the cells when a file is
read (:mod:`harness.analysis.sweepfits`).

Cells are append-only: a cell never changes once written. Whatever is only known at the end
(the confirmed GEMM peak) lives in its own record, and a cell's share of it is computed on
reading (:meth:`Run.pct_peak`). Version 1 also stored ``pct_peak`` in each bench cell,
rewritten after the peak was confirmed; reading a v1 file drops it, since it equals what
:meth:`Run.pct_peak` computes from the v1 file's own peaks.

Version 3 adds, for cells run on a cluster (``--executor ray``), the node a cell ran on
(``node``: hostname, CPU model, cores, GPU, torch build, Ray node id and the ``kind`` label that
groups identical machines) and, for bench cells, when its task held the node (``started_at``,
``ended_at``: seconds since the epoch on that node's clock). They are written only when known,
so a local run's cells look as in version 2; every v1 and v2 file reads unchanged. A bench cell timed in
rounds beside other contenders may carry a ``rounds`` record (:class:`~harness.results.Rounds`: per-round
medians, the paired ratio to the reference with its interval, the roofs read beside it), written only when
present, so cells without it read and write as before. A peak
measured on a cluster is keyed per node kind (``"float32/cpu@<kind>"``).

In memory every key is typed: ``peaks`` is keyed by :class:`~harness.results.keys.PeakKey`, ``bandwidth`` by
:class:`~harness.results.keys.BandwidthKey`, a bench cell's ``peak_key`` is a ``PeakKey``, and a cell's case
is a :class:`~harness.results.cells.CellCase`. The stored text of a key is read in one place
(:meth:`PeakKey.from_json <harness.results.keys.PeakKey.from_json>`, :meth:`BandwidthKey.from_json
<harness.results.keys.BandwidthKey.from_json>`), when a run is read or built from its stored form.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from harness.results.cells import (
    INTEGRITY,
    PROBLEMS,
    BenchCell,
    Cell,
    CellKey,
    Status,
    VerifyCell,
    cell_from_json,
    cell_to_json,
    node_kind,
    problems,
    with_,
)
from harness.results.keys import BandwidthKey, PeakKey
from harness.results.records import Bandwidth, Config, Coverage, Environment, Peak, Record
from harness.results.validate import Damaged, check_run

__all__ = ["INTEGRITY", "PROBLEMS", "READABLE_VERSIONS", "SCHEMA", "SCHEMA_VERSION", "BandwidthKey", "BenchCell", "Cell",
           "CellKey", "PeakKey", "Run", "Status", "VerifyCell", "cell_from_json", "cell_to_json",
           "node_kind", "problems", "with_"]

SCHEMA = "attnbench.results"
SCHEMA_VERSION = 3
READABLE_VERSIONS = (1, 2, 3)
LEGACY_KEYS = ("fits",)
"""Keys older files hold that are read past: derived values (the run's cost-model fits), derived again on reading."""


KeyT = TypeVar("KeyT", PeakKey, BandwidthKey)
RecordT = TypeVar("RecordT", bound=Record)


def _keyed(records: Mapping[Any, Any], key: Callable[[str], KeyT], record: Callable[[Any], RecordT],
           where: str) -> dict[KeyT, RecordT]:
    """A run's records by typed key, from typed keys or their stored text (read here, by the key's own
    ``from_json``); a key that is neither is damage named where it is."""
    out: dict[KeyT, RecordT] = {}
    for name, value in records.items():
        try:
            typed = name if isinstance(name, (PeakKey, BandwidthKey)) else key(name)
        except ValueError as exc:
            raise Damaged(f"{where}[{name!r}]", str(exc)) from None
        out[typed] = record(value)  # type: ignore[index]
    return out


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
    peaks: Mapping[PeakKey, Peak] = field(default_factory=dict)
    coverage: Mapping[str, Coverage] | None = None
    schema_version: int = SCHEMA_VERSION
    bandwidth: Mapping[BandwidthKey, Bandwidth] | None = None
    """bench: measured memory bandwidth per device and thread count (read_gbps, copy_gbps, ...); None in files that
    lack it."""

    def __post_init__(self) -> None:  # records given as their stored form (JSON objects) are read as records
        object.__setattr__(self, "environment", Environment.coerce(self.environment))
        object.__setattr__(self, "config", Config.coerce(self.config))
        object.__setattr__(self, "peaks", _keyed(self.peaks, PeakKey.from_json, Peak.coerce, "peaks"))
        if self.coverage is not None:
            object.__setattr__(self, "coverage", {k: Coverage.coerce(v) for k, v in self.coverage.items()})
        if self.bandwidth is not None:
            object.__setattr__(self, "bandwidth", _keyed(self.bandwidth, BandwidthKey.from_json, Bandwidth.coerce,
                                                         "bandwidth"))

    def bench_cells(self) -> list[BenchCell]:
        return [c for c in self.cells if isinstance(c, BenchCell)]

    def verify_cells(self) -> list[VerifyCell]:
        return [c for c in self.cells if isinstance(c, VerifyCell)]

    def pct_peak(self, cell: BenchCell) -> float | None:
        """The cell's GFLOP/s as a percentage of its dtype's measured GEMM peak (None if either is missing)."""
        record = None if cell.peak_key is None else self.peaks.get(cell.peak_key)
        peak = None if record is None else record.gflops
        return None if not peak or cell.gflops is None else 100.0 * cell.gflops / peak

    def read_bandwidth(self, cell: BenchCell) -> float | None:
        """The read bandwidth (GB/s) measured for the cell's device and thread count, on its own kind of
        machine for a cluster cell (never another kind's), if any."""
        device = cell.case.device or "cpu"  # the cell's own case: nothing read back out of a key
        record = (self.bandwidth or {}).get(BandwidthKey(device, cell.threads, node_kind(cell)))
        return None if record is None else record.read_gbps

    def pct_bandwidth(self, cell: BenchCell) -> float | None:
        """The cell's compulsory GB/s as a percentage of the measured read bandwidth (None if either is missing)."""
        roof, gbps = self.read_bandwidth(cell), cell.gbps
        return None if not roof or gbps is None else 100.0 * gbps / roof

    def to_json(self) -> dict[str, Any]:
        stored = self._to_json()
        if self.bandwidth is not None:  # appended: files without it read as before
            stored["bandwidth"] = {key.to_json(): record.to_json() for key, record in self.bandwidth.items()}
        return stored

    def _to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA, "schema_version": SCHEMA_VERSION, "run_id": self.run_id, "command": self.command,
            "complete": self.complete, "environment": self.environment.to_json(),
            "config": self.config.to_json(), "implementations": dict(self.implementations),
            "peaks": {key.to_json(): peak.to_json() for key, peak in self.peaks.items()},
            "coverage": None if self.coverage is None else {name: c.to_json() for name, c in self.coverage.items()},
            "cells": [cell_to_json(c) for c in self.cells],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Run:
        """A run from its stored form, any readable version (the caller has checked ``schema``)."""
        version = data.get("schema_version")
        if isinstance(version, bool) or version not in READABLE_VERSIONS:
            raise ValueError(f"schema_version {version!r}; this attnbench reads {READABLE_VERSIONS}")
        check_run(data)  # untrusted data: every value typed before a record is built
        return cls(
            run_id=str(data.get("run_id", "")), command=str(data.get("command", "")),
            complete=bool(data.get("complete")), environment=Environment.from_json(data.get("environment") or {}),
            config=Config.from_json(data.get("config") or {}), cells=_cells(data.get("cells") or ()),
            implementations=data.get("implementations") or {},
            peaks=_keyed(data.get("peaks") or {}, PeakKey.from_json, Peak.from_json, "peaks"),
            coverage=None if data.get("coverage") is None
            else {name: Coverage.from_json(c) for name, c in data["coverage"].items()}, schema_version=int(version),
            bandwidth=None if data.get("bandwidth") is None
            else _keyed(data["bandwidth"], BandwidthKey.from_json, Bandwidth.from_json, "bandwidth"),
        )


def _cells(stored: Any) -> tuple[Cell, ...]:
    """The stored cells, read; one that does not read (a peak key that is no key) is damage named where it is."""
    cells = []
    for i, cell in enumerate(stored):
        try:
            cells.append(cell_from_json(cell))
        except ValueError as exc:
            raise Damaged(f"cells[{i}]", str(exc)) from None
    return tuple(cells)
