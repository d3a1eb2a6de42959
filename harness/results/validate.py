"""A result file is untrusted data: every value is checked against the schema before a record is built.

A file can come from anywhere (a CI artefact, a colleague, an old attnbench, a hand edit, an attacker),
and reports and comparisons read it. So :func:`check_run` checks the stored document once with pydantic,
over the types the records and cells declare (their dataclasses are the schema: nothing is said twice; a
record's and a key's stored form is theirs to say, ``__get_pydantic_core_schema__``), as strictly as JSON's
own types (a string is no number, ``true`` no count, ``2.0`` no integer), and raises :class:`Damaged` naming
*where* (``cells[3].stats.median``, from pydantic's location) and *what* ("'fast' is a string, not a number").
Readers turn it into ``FILE: a damaged result file: WHERE: WHAT`` (exit 2), never a traceback. pydantic is
imported by the first check, so a command that reads no result file (``--help``) never pays for its import.

Beyond the declared types, checked here:

- integers are bounded (|n| <= 2**63): a 5000-digit integer is damage, not a size;
- every value nests at most :data:`MAX_DEPTH` deep (free-form values too: a case's unknown fields,
  metrics, the implementations' declarations), so no reader recurses without bound;
- a measured bench cell's times (samples and median) are finite and positive (the value probe's, finite and
  not negative): a NaN, infinite, zero or negative time is not a measurement; a bench cell's FLOPs, GFLOP/s
  and bytes are not negative or infinite; an ok bench cell has its samples; a peak or bandwidth reading is
  above 0; a case's batch, heads and head dimension are at least 1 and its dtype one attnbench knows. NaN
  elsewhere (the error of a NaN output) stays readable.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Iterator, Mapping
from typing import Any

from harness.results.cells import BenchCell, CellCase, VerifyCell
from harness.results.keys import BandwidthKey, PeakKey
from harness.results.records import Bandwidth, Config, Coverage, Environment, Peak, Record

MAX_DEPTH = 32
"""How deep a run's or a cell's JSON may nest (arrays and objects); attnbench's own nest a handful of levels."""
MAX_INT = 2**63

_SIZES = ("batch", "heads", "tq", "d", "kv_heads", "tk", "page_size")
_COUNTS = ("batch", "heads", "d", "kv_heads", "page_size")
"""The sizes a case has at least one of (a sequence may be empty: 0 rows is a case verify checks)."""
_RATES = ("gflops", "fastest_call_gflops", "first_gflops", "confirmed_gflops", "read_gbps", "copy_gbps")
"""The peak and bandwidth readings the reports divide by: above 0 (or null, not measured)."""
_METRICS = ("max_abs_err", "rel_l2", "ratio", "bound", "base_err", "floor", "T")
"""The verify metrics readers compute with: numbers (or null)."""
_EXPECTED = {"int_type": "an integer", "float_type": "a number", "bool_type": "true or false", "string_type": "a string",
             "dict_type": "an object", "dataclass_type": "an object", "tuple_type": "an array", "list_type": "an array"}
"""What belongs where pydantic found a value of the wrong JSON type, by its error's type."""


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


def _at(where: str, *keys: object) -> str:
    """``where`` some steps down: ``cells[3]``, ``stats.median``, ``peaks['float32/cpu']``."""
    for key in keys:
        if isinstance(key, int):
            where = f"{where}[{key}]"
        elif not str(key).isidentifier():
            where = f"{where}[{_show(str(key))}]"
        else:
            where = f"{where}.{key}" if where else str(key)
    return where


def check_depth(value: object, where: str) -> None:
    """A JSON object or array with at most :data:`MAX_DEPTH` levels of arrays and objects in it, and bounded
    integers: walked before pydantic, which bounds neither, and without recursion, so a damaged file never
    exhausts the stack (where a value is, is spelled out only for the one that is wrong)."""
    stack: list[tuple[object, tuple[object, ...]]] = [(value, ())]
    while stack:
        item, path = stack.pop()
        for key, child in item.items() if isinstance(item, dict) else enumerate(item) if isinstance(item, list) else ():
            if isinstance(child, (dict, list)):
                if len(path) >= MAX_DEPTH:
                    raise Damaged(_at(where, *path, key), f"nested more than {MAX_DEPTH} levels deep")
                stack.append((child, (*path, key)))
            elif isinstance(child, int) and not isinstance(child, bool) and abs(child) > MAX_INT:
                raise Damaged(_at(where, *path, key), f"an integer of {len(str(abs(child)))} digits is out of range")


@functools.cache
def _adapter(kind: object) -> Any:
    """pydantic's validator of one stored form (a cell's or a record's type, or "run"), built once per process."""
    from pydantic import TypeAdapter
    from typing_extensions import TypedDict  # pydantic reads typing's own only from Python 3.12

    class StoredRun(TypedDict, total=False):
        """The run's stored keys as :meth:`Run.from_json <harness.results.schema.Run.from_json>` reads them: each may
        be absent or null (an older file's). The cells are checked one by one (:func:`check_cell`), and
        ``implementations`` given as an array (no attnbench writes one; the readers take it as it is) is any JSON."""

        run_id: str | None
        command: str | None
        complete: bool | None
        environment: Environment | None
        config: Config | None
        peaks: Mapping[PeakKey, Peak] | None
        bandwidth: Mapping[BandwidthKey, Bandwidth] | None
        coverage: Mapping[str, Coverage] | None
        implementations: Mapping[str, Mapping[str, Any]] | None

    return TypeAdapter(StoredRun if kind == "run" else kind)


def _checked(value: object, kind: object, where: str) -> Any:
    """``value`` as pydantic reads it for ``kind``, from JSON text (so strict means JSON's types: an array is a tuple,
    a word an enum's value, and nothing else converts); pydantic's errors as :class:`Damaged`, the first three."""
    from pydantic import ValidationError

    check_depth(value, where)
    # pydantic's parser refuses a lone surrogate that Python's reads: such a character is checked as "?"
    text = json.dumps(value, ensure_ascii=False).encode("utf-8", "replace")
    try:
        return _adapter(kind).validate_json(text, strict=True)
    except ValidationError as exc:
        errors = [_located(error, where) for error in exc.errors(include_url=False)]
        more = f" (and {len(errors) - 3} more)" if len(errors) > 3 else ""
        raise Damaged(errors[0][0], "; ".join([errors[0][1], *(f"{at}: {what}" for at, what in errors[1:3])]) + more) from None


def _located(error: Mapping[str, Any], where: str) -> tuple[str, str]:
    """A pydantic error as (where, what): its location under ``where`` (a key that is wrong itself, pydantic's
    ``[key]``, as the key it is: ``peaks['float32']``), and what is wrong, said as attnbench always said it (the
    value, what it is and what belongs there), or pydantic's message with the value it got (unless the message is
    a reader's, which names the value itself)."""
    loc, value, kind = tuple(error["loc"]), error.get("input"), error["type"]
    if loc[-1:] == ("[key]",):
        where, loc = f"{_at(where, *loc[:-2])}[{_show(str(loc[-2]))}]", ()
    if kind in _EXPECTED:
        return _at(where, *loc), f"{_show(value)} is {_kind(value)}, not {_EXPECTED[kind]}"
    if kind == "enum":
        return _at(where, *loc), f"{_show(value)} is not one of {error['ctx']['expected']}"
    what = str(error["msg"]).removeprefix("Value error, ")
    what = what[:1].lower() + what[1:]
    return _at(where, *loc), what if kind in ("missing", "value_error") else f"{_show(value)}: {what}"


def check_record(value: object, kind: type[Record], where: str) -> None:
    """A record's stored object: its known fields typed, the rest any (bounded) JSON."""
    _checked(value, kind, where)


def check_cell(cell: object, where: str, summary_only: bool = False) -> None:
    """A stored cell: its type, every field's type, its case, and a measured cell's times. ``summary_only``: the
    cell may stand on its stored median alone (a pytest-benchmark file saved without its raw data)."""
    if not isinstance(cell, dict):
        raise Damaged(where, f"{_show(cell)} is not an object (a cell)")
    kinds: dict[str, type[BenchCell] | type[VerifyCell]] = {"bench": BenchCell, "verify": VerifyCell}
    kind = kinds.get(cell["type"]) if isinstance(cell.get("type"), str) else None
    if kind is None:
        raise Damaged(_at(where, "type"), f"a cell of unknown type {_show(cell.get('type'))} (expected 'bench' or 'verify')")
    typed = _checked(cell, kind, where)
    _raise_first(where, _case_problems(typed.case), *((_counts(typed), _times(typed, summary_only))
                                                      if kind is BenchCell else (_metrics(typed),)))


Problems = Iterator[tuple[tuple[object, ...], str]]
"""What a rule finds wrong, each (where below the value checked, what)."""


def _raise_first(where: str, *problems: Problems) -> None:
    for at, what in (problem for found in problems for problem in found):
        raise Damaged(_at(where, *at), what)


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _case_problems(case: CellCase | None) -> Problems:
    """A case's sizes (at least 0, or 1 for the counts), its dtype (one attnbench knows) and its window (two
    offsets): what its readers compute with."""
    from harness.case.dtypes import DTYPES

    if case is None:
        return
    for name in _SIZES:
        value = getattr(case, name)
        if value is not None and not (1 if name in _COUNTS else 0) <= value <= 2**40:
            yield ("case", name), f"{_show(value)} is not a size" + (" (at least 1)" if name in _COUNTS else "")
    if case.dtype is not None and case.dtype not in DTYPES:
        yield ("case", "dtype"), f"{_show(case.dtype)} is not a dtype attnbench knows ({', '.join(DTYPES)})"
    if case.window is not None and len(case.window) != 2:
        yield ("case", "window"), "a window is [left, right]"


def _metrics(cell: VerifyCell) -> Problems:
    """A verify cell's numbers readers compute with: each a number or null."""
    for name in _METRICS:
        value = cell.metrics.get(name)
        if value is not None and not _number(value):
            yield ("metrics", name), f"{_show(value)} is not a number"


def _counts(cell: BenchCell) -> Problems:
    """A bench cell's counts (0 or more, finite: the roofline takes their powers and logs; NaN: unknown, as older
    files may say), and the value probe's samples: finite and 0 or more (a call on the CPU clock may read 0 at its
    resolution; the verdict skips a round it cannot divide by)."""
    for name in ("flops", "gflops", "bytes"):
        value = getattr(cell, name)
        if value is not None and (value < 0 or math.isinf(value)):
            yield (name,), f"{_show(value)} is not a count (a finite number, 0 or more)"
    probe = cell.value_probe.samples_s if cell.value_probe is not None else None
    for name, times in (probe or {}).items():
        yield from ((("value_probe", "samples_s", name, i), f"{_show(t)} is not a time (a finite number of seconds, "
                     "0 or more)") for i, t in enumerate(times) if not (math.isfinite(t) and t >= 0))


def _times(cell: BenchCell, summary_only: bool) -> Problems:
    """A measured (ok) cell's times: its samples, there and each finite and above 0, and its stats' times."""
    if cell.status != "ok":
        return
    if not cell.samples_s and not (summary_only and cell.median is not None):
        yield ("samples_s",), "an ok cell without samples: a measured cell keeps its times"
    for at, value in [(("samples_s", i), t) for i, t in enumerate(cell.samples_s)] + [
            (("stats", name), getattr(cell.stats, name, None)) for name in ("median", "min", "mean")]:
        if value is not None and not (math.isfinite(value) and value > 0):
            yield at, f"{_show(value)} is not a time (a finite number of seconds above 0)"


def _readings(run: Mapping[str, Any]) -> Problems:
    """The numbers the reports divide by or raise to: each peak and bandwidth reading a finite number above 0 (or
    null), and an implementation's declared memory exponent finite and below 100 in size."""
    for record in ("peaks", "bandwidth"):
        for key, reading in (run.get(record) or {}).items():
            yield from (((record, str(key), rate), f"{_show(reading[rate])} is not a rate (a finite number above 0)")
                        for rate in _RATES if reading.get(rate) is not None
                        and not (math.isfinite(reading[rate]) and reading[rate] > 0))
    for name, info in (run.get("implementations") or {}).items():
        exponent = info.get("memory_exponent")
        if exponent is not None and not (_number(exponent) and math.isfinite(exponent) and abs(exponent) < 100):
            yield ("implementations", name, "memory_exponent"), f"{_show(exponent)} is not an exponent"


def check_run(data: Mapping[str, Any]) -> None:
    """The stored run (a readable version; the caller has checked ``schema``), field by field, then each cell. A
    legacy key (:data:`harness.results.schema.LEGACY_KEYS`: an older file's stored fits) is read past, whatever it
    holds (bounded as any value)."""
    stored = {k: v for k, v in data.items() if k != "cells"}
    if isinstance(stored.get("implementations"), list):
        check_depth(stored.pop("implementations"), "implementations")
    _raise_first("", _readings(_checked(stored, "run", "")))
    cells = data.get("cells")
    if cells is not None and not isinstance(cells, list):
        raise Damaged("cells", f"{_show(cells)} is {_kind(cells)}, not an array of cells")
    for i, cell in enumerate(cells or ()):
        check_cell(cell, f"cells[{i}]")
