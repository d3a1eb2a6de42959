"""The typed records inside a result file: stats, memory, peaks, bandwidth, nodes, environment, config,
coverage (and, in :mod:`harness.results.evidence`, what backs a cell's time).

Each record is a frozen dataclass with :meth:`Record.to_json` and :meth:`Record.from_json`. Writers
build records and readers use attributes; the JSON object is only the storage form.

Three rules keep every file this attnbench reads readable, and every file it writes as it was:

- A key the record does not know is kept in ``extra`` and written back after the known ones: an
  older or newer file's record reads and rewrites whole, never raising.
- A record read from a file remembers the order and presence of its keys (``stored``), so writing
  it again gives the same object, with the same explicit nulls. A record a writer builds lists its
  known fields in declaration order, omitting None except for the fields the writer always stores
  (``ALWAYS``): declaration order is the order the measuring code has always written.
- A record is also a read-only ``Mapping`` of its stored form (``peak["gflops"]``), so code that reads
  the JSON object reads a record alike; records compare equal to a mapping of the same stored form.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

R = TypeVar("R", bound="Record")


def _encode(value: object) -> object:
    if isinstance(value, Record):
        return value.to_json()
    if isinstance(value, tuple):
        return [_encode(v) for v in value]
    if isinstance(value, Mapping):  # a record's mapping field (per-name samples): its tuples stored as lists
        return {k: _encode(v) for k, v in value.items()}
    return value


def _view(value: object) -> object:
    """A field as the mapping view shows it: tuples as the lists they are stored as, records as themselves."""
    return [_view(v) for v in value] if isinstance(value, tuple) else value


@dataclass(frozen=True, eq=False, kw_only=True)
class Record(Mapping[str, object]):
    """A typed JSON object: known fields as attributes, unknown keys kept in ``extra``."""

    ALWAYS: ClassVar[frozenset[str]] = frozenset()
    """Fields written even when None (their writer always stores them, null when unknown)."""
    NESTED: ClassVar[Mapping[str, type[Record]]] = {}
    """Fields that hold a record of their own."""
    TUPLES: ClassVar[frozenset[str]] = frozenset()
    """Fields stored as JSON lists and held as tuples (records are frozen all the way down)."""
    RECORD_TUPLES: ClassVar[Mapping[str, type[Record]]] = {}
    """Fields stored as JSON lists of objects and held as tuples of records."""
    NULLABLE: ClassVar[frozenset[str] | None] = None
    """The fields a stored object may hold as null (None: every field); the others are absent or of their type."""

    extra: Mapping[str, Any] = field(default_factory=dict, repr=False)
    """Keys this attnbench does not know, as read (JSON values)."""
    stored: tuple[str, ...] | None = field(default=None, repr=False)
    """The keys of the object this record was read from, in order (None: built by a writer)."""

    def _names(self) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(self) if f.name not in ("extra", "stored"))

    def _keep_null(self, name: str) -> bool:
        return name in self.ALWAYS

    def _written(self) -> list[str]:
        names = self._names()
        if self.stored is not None:
            keys = [k for k in self.stored if k in self.extra or k in names]
            seen = set(keys)
            keys += [n for n in names if n not in seen and getattr(self, n) is not None]
        else:
            keys = [n for n in names if getattr(self, n) is not None or self._keep_null(n)]
        seen = set(keys)
        return keys + [k for k in self.extra if k not in seen]

    def _value(self, key: str) -> object:
        if key in self.extra and (key not in self._names() or getattr(self, key) is None):
            return self.extra[key]
        return getattr(self, key)

    def to_json(self) -> dict[str, Any]:
        """The stored form: a JSON object, keys in the order they are written."""
        return {key: _encode(self._value(key)) for key in self._written()}

    @classmethod
    def from_json(cls: type[R], data: Mapping[str, Any]) -> R:
        """The record of a stored object; unknown keys go to ``extra``, nothing is dropped. Anything but an
        object is a TypeError naming the record (a damaged file, reported as such by its reader)."""
        if not isinstance(data, Mapping):
            raise TypeError(f"a {cls.__name__.lower()} record must be a JSON object, not {type(data).__name__}")
        names = {f.name for f in dataclasses.fields(cls)} - {"extra", "stored"}
        values: dict[str, object] = {}
        for key, value in data.items():
            if key not in names:
                continue
            nested = cls.NESTED.get(key)
            if nested is not None and isinstance(value, Mapping):
                value = nested.coerce(value)
            elif key in cls.RECORD_TUPLES and isinstance(value, list):
                kind = cls.RECORD_TUPLES[key]
                value = tuple(kind.coerce(v) if isinstance(v, Mapping) else v for v in value)
            elif key in cls.TUPLES and isinstance(value, list):
                value = tuple(value)
            values[key] = value
        extra = {k: v for k, v in data.items() if k not in names}
        return cls(**values, extra=extra, stored=tuple(data))

    @classmethod
    def __get_pydantic_core_schema__(cls, source: object, handler: Any) -> Any:
        """What a result file's check (:mod:`harness.results.validate`, pydantic) takes this record's stored object
        to be: the record's constructor is not its stored form (``extra`` and ``stored`` are bookkeeping, and a key
        the record does not know is kept, not refused), so the object is each known field of its declared type,
        every one optional, and any other key as it is."""
        from pydantic_core import core_schema

        hints = typing.get_type_hints(cls)
        fields = {}
        for name in (f.name for f in dataclasses.fields(cls) if f.name not in ("extra", "stored")):
            hint = hints[name]
            if cls.NULLABLE is not None and name not in cls.NULLABLE:
                (hint,) = [a for a in typing.get_args(hint) if a is not type(None)] or [hint]
            fields[name] = core_schema.typed_dict_field(handler.generate_schema(hint), required=False)
        return core_schema.typed_dict_schema(fields, extra_behavior="allow")

    @classmethod
    def coerce(cls: type[R], value: Mapping[str, object]) -> R:
        """``value`` as this record: itself when it is one, else read as its stored form."""
        return value if isinstance(value, cls) else cls.from_json(value)

    def __getitem__(self, key: str) -> object:
        if key not in self._written():
            raise KeyError(key)
        return _view(self._value(key))

    def __iter__(self) -> Iterator[str]:
        return iter(self._written())

    def __len__(self) -> int:
        return len(self._written())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Record):
            return self.to_json() == other.to_json()
        if isinstance(other, Mapping):
            return self.to_json() == {k: _encode(v) for k, v in other.items()}
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]


def coerce_optional(kind: type[R], value: Mapping[str, object] | None) -> R | None:
    return None if value is None else kind.coerce(value)


@dataclass(frozen=True, eq=False, kw_only=True)
class Stats(Record):
    """Summary statistics of timing samples (:func:`harness.analysis.stats.summarize`)."""

    median: float | None = None
    iqr: float | None = None
    min: float | None = None
    mean: float | None = None
    stdev: float | None = None
    iqr_over_median: float | None = None
    n: int | None = None


@dataclass(frozen=True, eq=False, kw_only=True)
class Memory(Record):
    """A cell's memory measure: peak bytes beyond its inputs, what it returned, and how it was measured."""

    ALWAYS = frozenset({"peak_extra_bytes", "method"})
    peak_extra_bytes: int | None = None
    output_bytes: int | None = None
    method: str | None = None
    note: str | None = None
    """Why the measure may be off (the allocator could not be set up for exact accounting)."""
    error: str | None = None
    """The memory worker's failure, when it failed (then the bytes are None)."""


@dataclass(frozen=True, eq=False, kw_only=True)
class Node(Record):
    """The machine a cluster cell ran on; ``kind`` groups the machines whose timings compare."""

    ALWAYS = frozenset({"gpu", "cuda"})
    hostname: str | None = None
    cpu_model: str | None = None
    cores: int | None = None
    gpu: str | None = None
    torch: str | None = None
    cuda: str | None = None
    kind: str | None = None
    node_id: str | None = None
    """The Ray node id (only in a Ray worker)."""
    node_ip: str | None = None


@dataclass(frozen=True, eq=False, kw_only=True)
class Peak(Record):
    """A GEMM peak in GFLOP/s: the run's "% of peak" divides by ``gflops``, the higher of two readings.

    ``first_gflops`` and ``confirmed_gflops`` are the readings before and after the cells (a failed
    confirmation is stored as null, so ``confirmed_gflops`` is written whenever ``first_gflops`` is)."""

    ALWAYS = frozenset({"gflops"})
    NESTED = {"stats": Stats, "node": Node}
    TUPLES = frozenset({"samples_s"})
    gflops: float | None = None
    fastest_call_gflops: float | None = None
    method: str | None = None
    n: int | None = None
    threads: int | None = None
    samples_s: tuple[float, ...] | None = None
    stats: Stats | None = None
    error: str | None = None
    node: Node | None = None
    """The node that measured it, for a peak per node kind."""
    first_gflops: float | None = None
    confirmed_gflops: float | None = None

    def _keep_null(self, name: str) -> bool:
        return name in self.ALWAYS or (name == "confirmed_gflops" and self.first_gflops is not None)


@dataclass(frozen=True, eq=False, kw_only=True)
class Bandwidth(Record):
    """Memory bandwidth in GB/s for one device and thread count: the roofline's memory roof."""

    ALWAYS = frozenset({"read_gbps"})
    NESTED = {"read_stats": Stats, "copy_stats": Stats, "node": Node}
    read_gbps: float | None = None
    copy_gbps: float | None = None
    method: str | None = None
    bytes: int | None = None
    threads: int | None = None
    read_stats: Stats | None = None
    copy_stats: Stats | None = None
    error: str | None = None
    node: Node | None = None
    first_read_gbps: float | None = None
    confirmed_read_gbps: float | None = None
    first_copy_gbps: float | None = None
    confirmed_copy_gbps: float | None = None

    def higher(self, reading: Bandwidth, *, confirm: bool) -> Bandwidth:
        """This record with a later reading folded in: the higher read and copy GB/s (load only ever
        lowers them); a confirming reading (after the cells) also keeps both as ``first_*``, ``confirmed_*``."""
        read = max(self.read_gbps or 0.0, reading.read_gbps or 0.0)
        copy = max(self.copy_gbps or 0.0, reading.copy_gbps or 0.0)
        if not confirm:
            return dataclasses.replace(self, read_gbps=read, copy_gbps=copy)
        return dataclasses.replace(self, read_gbps=read, copy_gbps=copy, first_read_gbps=self.read_gbps,
                                   confirmed_read_gbps=reading.read_gbps, first_copy_gbps=self.copy_gbps,
                                   confirmed_copy_gbps=reading.copy_gbps)


@dataclass(frozen=True, eq=False, kw_only=True)
class Environment(Record):
    """Where and with what a run was made: enough to tell two runs' machines apart."""

    ALWAYS = frozenset({"attnbench", "python", "platform", "cpu_model", "cores", "threads", "ram_bytes", "gpu", "torch",
                        "numpy", "xformers", "triton", "git_commit", "command_line", "time"})
    attnbench: str | None = None
    python: str | None = None
    platform: str | None = None
    cpu_model: str | None = None
    cores: int | None = None
    threads: int | None = None
    ram_bytes: int | None = None
    gpu: str | None = None
    torch: str | None = None
    numpy: str | None = None
    xformers: str | None = None
    triton: str | None = None
    git_commit: str | None = None
    """attnbench's own commit, when it runs from a git checkout."""
    command_line: str | None = None
    time: str | None = None
    plugin_commit: str | None = None
    """The commit of the git repository holding the (first) plugin file: the revision a plugin's history follows."""
    plugin_commits: Mapping[str, str] | None = None
    """Each plugin file -> its repository's commit."""
    plugin_packages: Mapping[str, str] | None = None
    """Packages the plugins imported -> installed version ("local": from the plugin's own checkout)."""


@dataclass(frozen=True, eq=False, kw_only=True)
class Config(Record):
    """The command's settings, as stored; ``--resume`` reads them back.

    bench and verify store different settings; the fields are the ones the harness reads back by
    name, every other setting stays in ``extra`` in its place. A writer stores its settings object's
    own JSON form (:meth:`Record.from_json`), so the file lists them in that object's order."""

    TUPLES = frozenset({"only", "plugins"})
    suite: str | None = None
    only: tuple[str, ...] | None = None
    plugins: tuple[str, ...] | None = None
    timeout_s: float | None = None
    threads: int | None = None
    device: str | None = None
    executor: str | None = None
    address: str | None = None


@dataclass(frozen=True, eq=False, kw_only=True)
class Coverage(Record):
    """verify: how many of an implementation's declared pairs of axis values its cases exercised."""

    covered: int = 0
    total: int = 0
    fraction: float = 1.0
    axes: Mapping[str, int] = field(default_factory=dict)
    """Values per declared axis."""
    suite: str | None = None
