"""A result file is untrusted data: every value is checked against the schema before a record is built.

A file can come from anywhere (a CI artefact, a colleague, an old attnbench, a hand edit, an attacker),
and reports and comparisons read it. So :func:`check_run` walks the stored document once, with the
types the records and cells declare (their dataclass annotations are the schema: nothing is said
twice), and raises :class:`Damaged` naming *where* (``cells[3].stats.median``) and *what* ("'fast' is
not a number"). Readers turn it into ``FILE: a damaged result file: WHERE: WHAT`` (exit 2), never a
traceback.

Beyond the declared types:

- integers are bounded (|n| <= 2**63): a 5000-digit integer is damage, not a size;
- free-form values (a case's unknown fields, metrics, the implementations' declarations) are any JSON
  nested at most :data:`MAX_DEPTH` deep, so no reader recurses without bound;
- the case fields the reports compute with (sizes, dtype, window, ...) have their declared types;
- a measured bench cell's times (samples and median) are finite and positive (the value probe's, finite and
  not negative): a NaN, infinite,
  zero or negative time is not a measurement; a bench cell's FLOPs, GFLOP/s and bytes are not negative
  or infinite; an ok bench cell has its samples; a peak or bandwidth reading is above 0; a case's
  batch, heads and head dimension are at least 1 and its dtype one attnbench knows. NaN elsewhere (the error
  of a NaN output) stays readable.

It is one module because it is one walk over the whole schema, each record's rules beside
the walk that reaches it.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from collections.abc import Mapping
from typing import Any

MAX_DEPTH = 32
"""How deep free-form JSON may nest (arrays and objects); attnbench writes at most 4."""
MAX_INT = 2**63

_SIZES = ("batch", "heads", "tq", "d", "kv_heads", "tk", "page_size")
_COUNTS = ("batch", "heads", "d", "kv_heads", "page_size")
"""The sizes a case has at least one of (a sequence may be empty: 0 rows is a case verify checks)."""
_RATES = ("gflops", "fastest_call_gflops", "first_gflops", "confirmed_gflops", "read_gbps", "copy_gbps")
"""The peak and bandwidth readings the reports divide by: above 0 (or null, not measured)."""
_METRICS = ("max_abs_err", "rel_l2", "ratio", "bound", "base_err", "floor", "T")
"""The verify metrics readers compute with: numbers (or null)."""


class Damaged(ValueError):
    """A value of a result file that the schema does not allow: ``where`` it is, ``what`` is wrong."""

    def __init__(self, where: str, what: str) -> None:
        super().__init__(f"{where}: {what}" if where else what)
        self.where, self.what = where, what


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _kind(value: object) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", int: "an integer",
            float: "a number", type(None): "null"}.get(type(value), type(value).__name__)


def _at(where: str, key: object) -> str:
    """``where`` one step down: ``cells[3]``, ``stats.median``, ``peaks["float32/cpu"]``."""
    if isinstance(key, int):
        return f"{where}[{key}]"
    if not str(key).isidentifier():
        return f"{where}[{_show(str(key))}]"
    return f"{where}.{key}" if where else str(key)


def check_depth(value: object, where: str, depth: int = 0) -> None:
    """Any JSON value nested at most :data:`MAX_DEPTH` deep, with bounded integers (walked without recursion
    past the limit, so a damaged file never exhausts the stack)."""
    stack: list[tuple[object, str, int]] = [(value, where, depth)]
    while stack:
        item, at, level = stack.pop()
        if level > MAX_DEPTH:
            raise Damaged(at, f"nested more than {MAX_DEPTH} levels deep")
        if isinstance(item, dict):
            stack += [(v, _at(at, k), level + 1) for k, v in item.items()]
        elif isinstance(item, list):
            stack += [(v, _at(at, i), level + 1) for i, v in enumerate(item)]
        elif isinstance(item, int) and not isinstance(item, bool) and abs(item) > MAX_INT:
            raise Damaged(at, f"an integer of {len(str(abs(item)))} digits is out of range")


def check_value(value: object, hint: Any, where: str) -> None:
    """``value`` as the stored form of a field annotated ``hint``."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return _check_union(value, typing.get_args(hint), where)
    if hint is Any or hint is object:
        return check_depth(value, where, 1)
    if isinstance(hint, type) and issubclass(hint, _record_base()):
        return check_record(value, hint, where)
    if isinstance(hint, type) and issubclass(hint, _key_base()):
        return _check_key(value, hint, where)
    if origin is tuple:
        return _check_array(value, typing.get_args(hint), where)
    if origin in (Mapping, dict, typing.Mapping):
        return _check_object(value, typing.get_args(hint), where)
    scalar = _SCALARS.get(hint) or (_check_word if isinstance(hint, type) and issubclass(hint, str) else None)
    if scalar is None:
        raise TypeError(f"the schema has a field type the check does not know: {hint!r}")  # a bug of ours
    return scalar(value, hint, where)


def _check_union(value: object, args: tuple[Any, ...], where: str) -> None:
    """An optional field (null or its type), or a value of any one of the types."""
    if value is None and type(None) in args:
        return
    rest = [a for a in args if a is not type(None)]
    if len(rest) == 1:
        return check_value(value, rest[0], where)
    for option in rest:
        try:
            return check_value(value, option, where)
        except Damaged:
            continue
    raise Damaged(where, f"{_show(value)} ({_kind(value)}) is not any of the allowed types")


def _check_bool(value: object, hint: Any, where: str) -> None:
    if not isinstance(value, bool):
        raise Damaged(where, f"{_show(value)} is {_kind(value)}, not true or false")


def _check_int(value: object, hint: Any, where: str) -> None:
    if isinstance(value, float) and math.isfinite(value) and value.is_integer() and abs(value) <= MAX_INT:
        return
    if not isinstance(value, int) or isinstance(value, bool):
        raise Damaged(where, f"{_show(value)} is {_kind(value)}, not an integer")
    if abs(value) > MAX_INT:
        raise Damaged(where, f"an integer of {len(str(abs(value)))} digits is out of range")


def _check_float(value: object, hint: Any, where: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise Damaged(where, f"{_show(value)} is {_kind(value)}, not a number")
    if isinstance(value, int) and abs(value) > MAX_INT:
        raise Damaged(where, f"an integer of {len(str(abs(value)))} digits is out of range")


def _check_word(value: object, hint: Any, where: str) -> None:
    """A string; for a ``str`` enum (Status), one of its words."""
    if not isinstance(value, str):
        raise Damaged(where, f"{_show(value)} is {_kind(value)}, not a string")
    if hint is not str and value not in {m.value for m in hint}:
        allowed = ", ".join(m.value for m in hint)
        raise Damaged(where, f"{_show(value)} is not one of {allowed}")


def _check_key(value: object, hint: Any, where: str) -> None:
    """A typed key (:mod:`harness.results.keys`), stored as its text: text its ``from_json`` reads."""
    if not isinstance(value, str):
        raise Damaged(where, f"{_show(value)} is {_kind(value)}, not a string")
    try:
        hint.from_json(value)
    except ValueError as exc:
        raise Damaged(where, str(exc)) from None


_SCALARS = {bool: _check_bool, int: _check_int, float: _check_float, str: _check_word}


def _check_array(value: object, args: tuple[Any, ...], where: str) -> None:
    """A tuple field: a JSON array of its items' types (``tuple[X, ...]``: any length)."""
    if not isinstance(value, list):
        raise Damaged(where, f"{_show(value)} is {_kind(value)}, not an array")
    items = [args[0]] * len(value) if len(args) == 2 and args[1] is Ellipsis else list(args)
    if len(items) != len(value):
        raise Damaged(where, f"an array of {len(value)} items, not {len(items)}")
    for i, (item, item_hint) in enumerate(zip(value, items)):
        check_value(item, item_hint, _at(where, i))


def _check_object(value: object, args: tuple[Any, ...], where: str) -> None:
    """A mapping field: a JSON object whose values are of its value type."""
    if not isinstance(value, dict):
        raise Damaged(where, f"{_show(value)} is {_kind(value)}, not an object")
    for key, item in value.items():
        check_value(item, args[1] if args else Any, _at(where, key))


@functools.cache
def _record_base() -> type:
    from harness.results.records import Record

    return Record


@functools.cache
def _key_base() -> type:
    from harness.results.keys import RoofKey

    return RoofKey


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(kind: type) -> dict[str, Any]:
    if kind in _HINTS:
        return _HINTS[kind]
    names = {f.name for f in dataclasses.fields(kind)} - {"extra", "stored"}
    _HINTS[kind] = {name: hint for name, hint in typing.get_type_hints(kind).items() if name in names}
    return _HINTS[kind]


def check_record(value: object, kind: type, where: str) -> None:
    """A record's stored object: its known fields typed, the rest any (bounded) JSON."""
    if not isinstance(value, dict):
        raise Damaged(where, f"{_show(value)} is {_kind(value)}, not an object (a {kind.__name__.lower()} record)")
    hints = _hints(kind)
    for key, item in value.items():
        if key in hints:
            check_value(item, hints[key], _at(where, key))
        else:
            check_depth(item, _at(where, key), 1)


@functools.cache
def _dtypes() -> tuple[str, ...]:
    from harness.case.dtypes import DTYPES

    return tuple(DTYPES)


@functools.cache
def _case_types() -> dict[str, Any]:
    """The case fields readers compute with, as :class:`harness.results.cells.CellCase` declares them; a field
    it may not store as null (the sizes, dtype, ...) is its type alone. Others are free-form."""
    from harness.results.cells import CellCase

    types_ = {}
    for name, hint in _hints(CellCase).items():
        if name not in CellCase.NULLABLE:
            (hint,) = [a for a in typing.get_args(hint) if a is not type(None)]
        types_[name] = hint
    return types_


def check_case(case: object, where: str) -> None:
    if case is None:
        return
    if not isinstance(case, dict):
        raise Damaged(where, f"{_show(case)} is {_kind(case)}, not an object (a case)")
    for key, item in case.items():
        at = _at(where, key)
        hint = _case_types().get(key)
        if hint is None:
            check_depth(item, at, 1)
            continue
        check_value(item, hint, at)
        if key in _SIZES and item is not None and not (1 if key in _COUNTS else 0) <= item <= 2**40:
            raise Damaged(at, f"{_show(item)} is not a size" + (" (at least 1)" if key in _COUNTS else ""))
        if key == "dtype" and item is not None and item not in _dtypes():
            raise Damaged(at, f"{_show(item)} is not a dtype attnbench knows ({', '.join(_dtypes())})")
        if key == "window" and item is not None and len(item) != 2:
            raise Damaged(at, "a window is [left, right]")


def _positive_time(value: object, where: str) -> None:
    if value is not None and not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise Damaged(where, f"{_show(value)} is not a time (a finite number of seconds above 0)")


def check_cell(cell: object, where: str, summary_only: bool = False) -> None:
    """A stored cell: its type, every field's type, its case, and a measured cell's times. ``summary_only``: the
    cell may stand on its stored median alone (a pytest-benchmark file saved without its raw data)."""
    from harness.results.cells import BenchCell, VerifyCell

    if not isinstance(cell, dict):
        raise Damaged(where, f"{_show(cell)} is {_kind(cell)}, not an object (a cell)")
    kinds: dict[object, type[BenchCell] | type[VerifyCell]] = {"bench": BenchCell, "verify": VerifyCell}
    kind = kinds.get(cell.get("type")) if isinstance(cell.get("type"), str) else None
    if kind is None:
        raise Damaged(_at(where, "type"), f"a cell of unknown type {_show(cell.get('type'))} (expected 'bench' or 'verify')")
    hints = _hints(kind)
    for name in ("implementation", "case_id", "status"):
        if name not in cell:
            raise Damaged(where, f"a {kind.type} cell without its {name!r}")
    for key, item in cell.items():
        if key == "case":
            check_case(item, _at(where, key))
        elif key in hints:
            check_value(item, hints[key], _at(where, key))
        elif key != "type":
            check_depth(item, _at(where, key), 1)
    if kind is VerifyCell:
        _check_metrics(cell.get("metrics") or {}, _at(where, "metrics"))
    else:
        _check_measured(cell, where, summary_only)


def _check_metrics(metrics: Mapping[str, Any], where: str) -> None:
    """A verify cell's numbers: each a number or null."""
    for name in _METRICS:
        if name in metrics:
            check_value(metrics[name], float | None, _at(where, name))


def _check_measured(cell: Mapping[str, Any], where: str, summary_only: bool = False) -> None:
    """A bench cell's counts (0 or more, finite: the roofline takes their powers and logs; NaN: unknown, as older
    files may say) and, for a measured cell, its times (finite, above 0)."""
    for name in ("flops", "gflops", "bytes"):
        value = cell.get(name)
        if value is not None and (value < 0 or math.isinf(value)):
            raise Damaged(_at(where, name), f"{_show(value)} is not a count (a finite number, 0 or more)")
    _check_probe_times(cell.get("value_probe"), _at(where, "value_probe"))
    if cell["status"] != "ok":
        return
    if not cell.get("samples_s") and not (summary_only and (cell.get("stats") or {}).get("median") is not None):
        raise Damaged(_at(where, "samples_s"), "an ok cell without samples: a measured cell keeps its times")
    for i, sample in enumerate(cell.get("samples_s") or ()):
        _positive_time(sample, _at(_at(where, "samples_s"), i))
    stats = cell.get("stats") or {}
    for name in ("median", "min", "mean"):
        _positive_time(stats.get(name), _at(_at(where, "stats"), name))


def _check_probe_times(probe: object, where: str) -> None:
    """The value probe's samples (their types already checked): each a finite number of seconds, 0 or more (a call
    on the CPU clock may read 0 at its resolution; the verdict skips a round it cannot divide by)."""
    samples = probe.get("samples_s") if isinstance(probe, dict) else None
    for name, times in (samples or {}).items() if isinstance(samples, dict) else ():
        for i, value in enumerate(times if isinstance(times, list) else ()):
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise Damaged(_at(_at(_at(where, "samples_s"), name), i),
                              f"{_show(value)} is not a time (a finite number of seconds, 0 or more)")


def _check_rates(data: Mapping[str, Any]) -> None:
    """Each peak and bandwidth reading the reports divide by: a finite number above 0, or null."""
    for record in ("peaks", "bandwidth"):
        for key, reading in (data.get(record) or {}).items():
            for rate in _RATES:
                value = reading.get(rate) if isinstance(reading, dict) else None
                if value is not None and not (isinstance(value, (int, float)) and not isinstance(value, bool)
                                              and math.isfinite(value) and value > 0):
                    raise Damaged(f"{_at(_at(record, key), rate)}", f"{_show(value)} is not a rate (a finite number above 0)")


def check_run(data: Mapping[str, Any]) -> None:
    """The stored run (a readable version; the caller has checked ``schema``), field by field. A legacy key
    (:data:`harness.results.schema.LEGACY_KEYS`: an older file's stored fits) is read past, whatever it holds."""
    from harness.results.records import Bandwidth, Config, Coverage, Environment, Peak

    for name, hint in (("run_id", str | None), ("command", str | None), ("complete", bool | None),
                       ("environment", Environment | None), ("config", Config | None),
                       ("peaks", Mapping[str, Peak] | None), ("bandwidth", Mapping[str, Bandwidth] | None),
                       ("coverage", Mapping[str, Coverage] | None),
                       ("implementations", Mapping[str, Mapping[str, Any]] | tuple[Any, ...] | None)):
        if name in data:
            check_value(data[name], hint, name)
    _check_rates(data)
    for name, info in (data.get("implementations") or {}).items() if isinstance(data.get("implementations"), dict) else ():
        exponent = info.get("memory_exponent")
        if exponent is not None and not (isinstance(exponent, (int, float)) and not isinstance(exponent, bool)
                                         and math.isfinite(exponent) and abs(exponent) < 100):
            raise Damaged(f"implementations.{name}.memory_exponent", f"{_show(exponent)} is not an exponent")
    cells = data.get("cells")
    if cells is None:
        return
    if not isinstance(cells, list):
        raise Damaged("cells", f"{_show(cells)} is {_kind(cells)}, not an array of cells")
    for i, cell in enumerate(cells):
        check_cell(cell, f"cells[{i}]")
