"""Cost-model fits as records of a result file's ``fits``, each under the key of everything it was fitted from.

Bench fits the sweeps of its own cells when a run finishes (:func:`harness.analysis.sweepfits.cell_sweep_fits`)
and stores each fit as a record here, naming the cells it was fitted from (:mod:`harness.results.fitcells`).
A report of one complete file whose fits all name its live cells takes them as they are (:attr:`StoredFits.as_is`).
Otherwise (several files combined, an unfinished run, a cell measured again, a file from before fits named
cells) it finds the sweeps, computes the same key for each implementation's points, and takes the stored fit
where the key matches, fitting only the rest. The key covers
every input of the fit: the sweep, the sizes, the values, the raw samples behind them, the theory, the
run's drift and the ratios to a reference, so a stored fit is reused only where a refit would read the same
numbers and give the same fit.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import numbers
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from harness.analysis.costmodel import CostFit
from harness.analysis.growth import Relative, Row
from harness.results import CellKey
from harness.results.fitcells import FittedCell, fitted_cells, still_live
from harness.results.validate import check_record

MODEL = "cost"
"""The ``model`` of a stored cost-model fit (older files also hold log-log and O(g) fits without one: left out)."""
DRIFT = "drift"
"""The ``model`` of the stored scatter between a run's cells (:func:`harness.analysis.costmodel.run_scatter`),
which every time fit's interval reads; keyed by the series it was measured on."""


@dataclass(frozen=True)
class NamedFit:
    """A stored fit as it is: its sweep (:data:`harness.analysis.sweepfits.SWEEPS`), key, row and the cells it
    was fitted from."""

    sweep: str
    key: str
    row: Row
    cells: tuple[FittedCell, ...]


@dataclass(frozen=True)
class StoredFits:
    """What the result files stored, by key: each cost-model fit, and each run's drift between cells."""

    rows: Mapping[str, Row] = field(default_factory=dict)
    drifts: Mapping[str, float] = field(default_factory=dict)
    as_is: tuple[NamedFit, ...] | None = None
    """One complete file's fits, in the order stored, when every one names cells that are still the file's live
    ones (:func:`harness.results.fitcells.still_live`): the report takes them as they are, finding no sweep;
    None otherwise (older or combined files, a cell measured again), and the sweeps are found and keyed."""
    drift: float | None = None
    drift_key: str = ""
    """That file's drift between cells and its key (with :attr:`as_is`)."""


def fit_key(inputs: object) -> str:
    """A digest of a fit's inputs (numbers as Python writes them: exact, as a result file keeps them)."""
    text = json.dumps(inputs, default=repr, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def row_record(sweep: str, key: str, row: Row, cells: Iterable[FittedCell] = ()) -> dict[str, Any] | None:
    """``row`` as a ``fits`` record naming the ``cells`` it was fitted from (None when a number in it is not
    finite: strict JSON would write it null, and the fit read back would differ from the one made, so the
    report fits it again instead)."""
    fields = _plain(dataclasses.asdict(row))
    if not _finite(fields):
        return None
    record = {"model": MODEL, "key": key, "sweep": sweep, "implementation": row.implementation,
              "quantity": row.quantity, "axis": row.axis, "row": fields}
    named = [cell.to_json() for cell in cells]
    return {**record, "cells": named} if named else record


def drift_record(key: str, drift: float) -> dict[str, Any] | None:
    """The run's drift as a ``fits`` record (None when not finite: see :func:`row_record`)."""
    return {"model": DRIFT, "key": key, "drift": float(drift)} if math.isfinite(drift) else None


def stored_fits(fits: Iterable[Mapping[str, Any]] | None, live: Mapping[CellKey, int] | None = None) -> StoredFits:
    """The stored cost-model fits and drifts by key; a record that does not read as one is left out (fitted again).
    ``live``: the live cells of the one complete file these fits come from (:func:`harness.results.fitcells.
    live_positions`; None for several files): where every fit names cells still live, the fits are taken as is."""
    rows: dict[str, Row] = {}
    drifts: dict[str, float] = {}
    named: list[NamedFit] | None = [] if live is not None else None
    for record in fits or ():
        if not isinstance(record, Mapping) or record.get("model") not in (MODEL, DRIFT):
            continue
        try:
            if record["model"] == MODEL:
                row = rows[str(record["key"])] = _row(record["row"])
                cells = fitted_cells(record)
                if named is not None and cells is not None and live is not None and still_live(cells, live):
                    named.append(NamedFit(str(record["sweep"]), str(record["key"]), row, cells))
                else:
                    named = None
            elif isinstance(record["drift"], (int, float)) and not isinstance(record["drift"], bool):
                drifts[str(record["key"])] = float(record["drift"])
        except (KeyError, TypeError, ValueError):
            named = None  # a damaged record: its sweep is found and fitted again
            continue
    as_is = tuple(named) if named else None
    drift_key, drift = next(iter(drifts.items()), ("", None)) if as_is is not None and len(drifts) == 1 else ("", None)
    if as_is is not None and len(drifts) > 1:
        as_is = None  # one file has one drift
    return StoredFits(rows, drifts, as_is, drift, drift_key)


def stored_rows(fits: Iterable[Mapping[str, Any]] | None) -> Mapping[str, Row]:
    """The stored cost-model fits by key (:func:`stored_fits`)."""
    return stored_fits(fits).rows


def _row(fields: Mapping[str, Any]) -> Row:
    """The stored row, each field of the type its record declares (a damaged one raises ValueError or TypeError)."""
    values = dict(fields)
    fit, relative = values.pop("fit", None), values.pop("relative", None)
    check_record(values, Row, "row")
    for part, kind in ((fit, CostFit), (relative, Relative)):
        if part is not None:
            check_record(part, kind, f"row.{kind.__name__}")
    return Row(**values, fit=None if fit is None else CostFit(**_tuples(fit)),
               relative=None if relative is None else Relative(**_tuples(relative)))


def _tuples(fields: Mapping[str, Any]) -> dict[str, Any]:
    """A record's lists as the tuples the frozen fit records hold."""
    return {k: tuple(v) if isinstance(v, list) else v for k, v in fields.items()}


def _plain(value: Any) -> Any:
    """NumPy's scalars as Python's (JSON writes an int64 as text, not as a number)."""
    if isinstance(value, (bool, str)) or value is None:
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _finite(value: object) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, Mapping):
        return all(_finite(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return all(_finite(v) for v in value)
    return True
