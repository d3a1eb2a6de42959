"""The keys of a run's roof records: which GEMM peak (:class:`PeakKey`) and which memory bandwidth
(:class:`BandwidthKey`) a record of ``Run.peaks`` / ``Run.bandwidth`` is, as typed values with their fields.

A result file stores them as the JSON object keys they name (``"float32/cpu"``, ``"float32/cpu@<kind>"``,
``"cpu/threads=2"``, ``"cpu/threads=default@<kind>"``): JSON keys are strings. That text is written by
:meth:`to_json` and read by :meth:`from_json`, here and nowhere else; everything past the reader holds the
typed key and reads its fields (``key.dtype``, ``key.kind``), never the text.

``kind`` is the node kind a cluster run measured the record on (:attr:`harness.results.Node.kind`); None is the
run's own machine. An empty kind (a cluster node without a kind label) is a kind of its own, stored ``"...@"``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, TypeVar

K = TypeVar("K", bound="RoofKey")

_DEFAULT_THREADS = "default"
"""The stored thread count of a bandwidth measured with the library's default threads."""


@dataclass(frozen=True)
class RoofKey:
    """What both keys share: a node kind, the stored text (:meth:`to_json`), and order by that text (so
    listings sort as the stored keys always did)."""

    def to_json(self) -> str:
        raise NotImplementedError

    @classmethod
    def from_json(cls, text: str) -> RoofKey:
        """The key of its stored text (each kind of key reads its own); a ValueError for any other text."""
        raise NotImplementedError

    @classmethod
    def __get_pydantic_core_schema__(cls, source: object, handler: Any) -> Any:
        """A key as a result file's check (:mod:`harness.results.validate`, pydantic) takes it: its stored text, read
        by :meth:`from_json` as every reader reads it, so a text no key has is damage where it stands."""
        from pydantic_core import core_schema

        return core_schema.no_info_after_validator_function(cls.from_json, core_schema.str_schema())

    def on(self: K, kind: str | None) -> K:
        """The same key for one kind of machine (None: the run's own)."""
        return replace(self, kind=kind)  # type: ignore[type-var, call-arg]

    def __str__(self) -> str:
        return self.to_json()

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, RoofKey):
            return NotImplemented
        return self.to_json() < other.to_json()


def _split_kind(text: str, what: str, example: str) -> tuple[str, str | None]:
    """``text`` as (the key before "@", the kind after it or None); a ValueError naming a key that is no string."""
    if not isinstance(text, str):
        raise ValueError(f"a {what} key must be a string like {example!r}, not {text!r}")
    head, at, kind = text.partition("@")
    return head, kind if at else None


@dataclass(frozen=True)
class PeakKey(RoofKey):
    """Which GEMM peak: a dtype on a device, measured on one kind of machine (None: the run's own)."""

    dtype: str
    device: str
    kind: str | None = None

    def to_json(self) -> str:
        text = f"{self.dtype}/{self.device}"
        return text if self.kind is None else f"{text}@{self.kind}"

    @classmethod
    def from_json(cls, text: str) -> PeakKey:
        """The key of ``"float32/cpu"`` or ``"float32/cpu@<kind>"``; a ValueError for any other text."""
        head, kind = _split_kind(text, "peak", "float32/cpu")
        dtype, slash, device = head.partition("/")
        if not slash or not dtype or not device or "/" in device:
            raise ValueError(f"peak key {text!r} is not 'DTYPE/DEVICE' or 'DTYPE/DEVICE@KIND' (e.g. 'float32/cpu')")
        return cls(dtype, device, kind)


@dataclass(frozen=True)
class BandwidthKey(RoofKey):
    """Which memory bandwidth: a device read by a number of threads (None: the library's default), measured on
    one kind of machine (None: the run's own). Bandwidth depends on the threads reading, so each count is its own."""

    device: str
    threads: int | None
    kind: str | None = None

    def to_json(self) -> str:
        text = f"{self.device}/threads={_DEFAULT_THREADS if self.threads is None else self.threads}"
        return text if self.kind is None else f"{text}@{self.kind}"

    @classmethod
    def from_json(cls, text: str) -> BandwidthKey:
        """The key of ``"cpu/threads=2"``, ``"cpu/threads=default"``, with ``"@<kind>"`` or without; a ValueError
        for any other text."""
        head, kind = _split_kind(text, "bandwidth", "cpu/threads=2")
        device, slash, threads = head.partition("/threads=")
        if not slash or not device or not (threads == _DEFAULT_THREADS or (threads.isascii() and threads.isdigit())):
            raise ValueError(f"bandwidth key {text!r} is not 'DEVICE/threads=N' or 'DEVICE/threads=N@KIND' "
                             f"(N a count or 'default'; e.g. 'cpu/threads=2')")
        return cls(device, None if threads == _DEFAULT_THREADS else int(threads), kind)
