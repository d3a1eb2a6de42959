"""A result file's cells: the statuses, the key that names what a cell measured, the case a cell ran
(:class:`CellCase`), bench and verify cells, and their stored form (:func:`cell_to_json`,
:func:`cell_from_json`). The run that holds them is :mod:`harness.results.schema`'s; the records inside
them are :mod:`harness.results.records`'.

It is one module because a cell, its case record and its stored form change together: a
field added to a cell is added to its stored form here, in one place.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar

from harness.case.attention import AttentionCase, CaseRecord
from harness.errors import UsageError
from harness.results.evidence import Integrity, Rounds, ValueProbe
from harness.results.keys import PeakKey
from harness.results.records import Memory, Node, Record, Stats, coerce_optional

if TYPE_CHECKING:  # the module cases import torch (their positional tables): a result file reads without it
    from harness.modules.cases import ModuleCase


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


@dataclass(frozen=True, eq=False, kw_only=True)
class CellCase(Record):
    """The case a cell ran, as its result file stores it: the fields readers compute with, typed (the rest, a
    module case's layer, newer fields, in ``extra``), read and written back whole like every record.

    A file may hold a case that no valid case has (heads not a multiple of kv_heads, a hand edit) or a newer
    attnbench's: it still reads. :meth:`typed` is the one place a stored case becomes the typed case that ran,
    an :class:`~harness.case.attention.AttentionCase` or a :class:`~harness.modules.cases.ModuleCase`."""

    NULLABLE: ClassVar[frozenset[str]] = frozenset({"scale", "window", "varlen", "causal_align", "cache_seqlens",
                                                   "page_size", "kv_dtype"})
    """Fields a case may store as null (none set); the others are absent or of their type."""
    TUPLES = frozenset({"window", "varlen", "cache_seqlens"})

    batch: int | None = None
    heads: int | None = None
    tq: int | None = None
    d: int | None = None
    kv_heads: int | None = None
    tk: int | None = None
    dtype: str | None = None
    device: str | None = None
    causal: bool | None = None
    mask: str | None = None
    mask_rank: str | None = None
    scale: float | None = None
    inputs: str | None = None
    layout: str | None = None
    self_attention: bool | None = None
    grad: bool | None = None
    bias: str | None = None
    kind: str | None = None
    """"kernel" (or absent): an attention call; "module": a module's layer call."""
    pairwise: bool | None = None
    window: tuple[int, ...] | None = None
    varlen: tuple[tuple[int, ...], ...] | None = None
    causal_align: str | None = None
    cache_seqlens: tuple[int, ...] | None = None
    page_size: int | None = None
    aux_layout: str | None = None
    kv_dtype: str | None = None
    growth: bool | None = None

    def __post_init__(self) -> None:
        if self.varlen is not None:  # JSON's nested lists, held as tuples (frozen all the way down)
            object.__setattr__(self, "varlen", tuple(tuple(pair) for pair in self.varlen))

    @classmethod
    def of(cls, case: CaseRecord) -> CellCase:
        """The stored form of a typed case a writer ran (its :meth:`typed` is that case, never rebuilt)."""
        stored = cls.from_json(case.to_dict())
        stored.__dict__["typed"] = case  # the cached_property's slot: what typed() would build
        return stored

    @classmethod
    def coerce_case(cls, value: CellCase | CaseRecord | Mapping[str, Any]) -> CellCase:
        """``value`` as a cell's case: itself, a typed case's stored form, or a stored object read."""
        if isinstance(value, CellCase):
            return value
        if isinstance(value, CaseRecord):
            return cls.of(value)
        return cls.from_json(value)

    @property
    def is_module(self) -> bool:
        return self.kind == "module"

    @cached_property
    def typed(self) -> AttentionCase | ModuleCase | None:
        """The typed case, built once from the stored fields (a module's :class:`ModuleCase`, any other an
        :class:`AttentionCase`); None for one that no valid case has, or whose structure no loaded plugin defines."""
        from harness.modules.cases import ModuleCase

        kind: type[AttentionCase] | type[ModuleCase] = ModuleCase if self.is_module else AttentionCase
        try:
            return kind.from_dict(self.to_json())
        except (TypeError, ValueError, KeyError, UsageError):
            return None

    @property
    def attention_case(self) -> AttentionCase | None:
        """:meth:`typed` when it is a kernel's attention case (None for a module's layers, or an invalid case)."""
        case = self.typed
        return case if isinstance(case, AttentionCase) and case.kind == "kernel" else None


@dataclass(frozen=True)
class BenchCell:
    """One (implementation, case, mode) timed, with its memory run."""

    type: ClassVar[str] = "bench"
    implementation: str
    case: CellCase
    """The case it timed (given as a typed case or its stored object, held as its record); :attr:`attention_case`
    is the typed attention case."""
    case_id: str
    mode: str
    status: Status
    reason: str | None = None
    flops: float | None = None
    peak_key: PeakKey | None = None
    """Which record of ``Run.peaks`` this cell's % of peak divides by (stored "float32/cpu")."""
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
    """Compulsory bytes of one call (Q, K, V read once, O written once: :func:`harness.reference.flops.compulsory_bytes`);
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
    rounds: Rounds | None = None
    """How the cell was timed in rounds beside its case's other contenders, its per-round ratio to the
    reference contender, and the roofs measured in the same rounds. Absent in files from before it."""
    sample_unit: str | None = None
    """"round": each sample is one interleaved round's time (the fastest of its calls; ``attnbench ab``), a replication
    that ``compare`` may test; None: calls of one run, which share its load and are never tested as replications."""
    value_probe: ValueProbe | None = None
    """The value probe's raw times: this cell's case timed under other distributions of its input values
    (docs/benchmarking.md, "Values"). Absent where the probe did not run (``--value-probe``) and in older files."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "status", Status(self.status))  # "ok" given as a word is the same status
        # a record given as its stored form (a JSON object) is read as the record, a key as its key
        object.__setattr__(self, "case", CellCase.coerce_case(self.case))
        if isinstance(self.peak_key, str):
            object.__setattr__(self, "peak_key", PeakKey.from_json(self.peak_key))
        object.__setattr__(self, "stats", coerce_optional(Stats, self.stats))
        object.__setattr__(self, "memory", coerce_optional(Memory, self.memory))
        object.__setattr__(self, "node", coerce_optional(Node, self.node))
        object.__setattr__(self, "integrity", coerce_optional(Integrity, self.integrity))
        object.__setattr__(self, "rounds", coerce_optional(Rounds, self.rounds))
        object.__setattr__(self, "value_probe", coerce_optional(ValueProbe, self.value_probe))
        if self.profile is not None:
            object.__setattr__(self, "profile", tuple((str(n), float(s)) for n, s in self.profile))

    @property
    def key(self) -> CellKey:
        return CellKey("bench", self.implementation, self.case_id, self.mode)

    @property
    def attention_case(self) -> AttentionCase | None:
        """The typed case the cell timed (:meth:`CellCase.typed`, built once). None for a case that is not a
        kernel's attention case (a module's layers), or one no valid case has (heads not a multiple of
        kv_heads, say, in a file written by hand)."""
        return self.case.attention_case

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
    case: CellCase | None
    """The case it checked (given as a typed case or its stored object); None for a check of no one case."""
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
        if self.case is not None:
            object.__setattr__(self, "case", CellCase.coerce_case(self.case))
        object.__setattr__(self, "node", coerce_optional(Node, self.node))

    @property
    def key(self) -> CellKey:
        return CellKey("verify", self.implementation, self.case_id, self.check)


Cell = BenchCell | VerifyCell


def node_kind(cell: Cell) -> str | None:
    """The kind of machine a cluster cell ran on (None for a cell of a local run)."""
    return None if cell.node is None else cell.node.kind


# absent when unknown: older cells read as before
_WHEN_KNOWN = {"node", "started_at", "ended_at", "integrity", "profile", "rounds", "sample_unit", "value_probe"}


def cell_to_json(cell: Cell) -> dict[str, Any]:
    stored: dict[str, Any] = {"type": cell.type}
    for f in dataclasses.fields(cell):
        value = getattr(cell, f.name)
        if value is None and f.name in _WHEN_KNOWN:
            continue
        if f.name == "profile":
            value = [list(pair) for pair in value]
        stored[f.name] = (value.value if isinstance(value, Status) else list(value) if isinstance(value, tuple)
                          else value.to_json() if isinstance(value, (Record, PeakKey)) else value)
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
