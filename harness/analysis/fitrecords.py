"""Cost-model fits as records of a result file's ``fits``, each under the key of everything it was fitted from.

Bench fits the sweeps of its own cells when a run finishes (:func:`harness.analysis.sweepfits.cell_sweep_fits`)
and stores each fit as a record here; the report finds the same sweeps in the file, computes the same key
for each implementation's points, and takes the stored fit where the key matches, fitting only the rest
(a file from before fits were stored, several files combined, a sweep that gained a cell). The key covers
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
from harness.results.validate import check_record

MODEL = "cost"
"""The ``model`` of a stored cost-model fit (older files also hold log-log and O(g) fits without one: left out)."""
DRIFT = "drift"
"""The ``model`` of the stored scatter between a run's cells (:func:`harness.analysis.costmodel.run_scatter`),
which every time fit's interval reads; keyed by the series it was measured on."""


@dataclass(frozen=True)
class StoredFits:
    """What the result files stored, by key: each cost-model fit, and each run's drift between cells."""

    rows: Mapping[str, Row] = field(default_factory=dict)
    drifts: Mapping[str, float] = field(default_factory=dict)


def fit_key(inputs: object) -> str:
    """A digest of a fit's inputs (numbers as Python writes them: exact, as a result file keeps them)."""
    text = json.dumps(inputs, default=repr, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def row_record(sweep: str, key: str, row: Row) -> dict[str, Any] | None:
    """``row`` as a ``fits`` record (None when a number in it is not finite: strict JSON would write it null,
    and the fit read back would differ from the one made, so the report fits it again instead)."""
    fields = _plain(dataclasses.asdict(row))
    if not _finite(fields):
        return None
    return {"model": MODEL, "key": key, "sweep": sweep, "implementation": row.implementation,
            "quantity": row.quantity, "axis": row.axis, "row": fields}


def drift_record(key: str, drift: float) -> dict[str, Any] | None:
    """The run's drift as a ``fits`` record (None when not finite: see :func:`row_record`)."""
    return {"model": DRIFT, "key": key, "drift": float(drift)} if math.isfinite(drift) else None


def stored_fits(fits: Iterable[Mapping[str, Any]] | None) -> StoredFits:
    """The stored cost-model fits and drifts by key; a record that does not read as one is left out (fitted again)."""
    rows: dict[str, Row] = {}
    drifts: dict[str, float] = {}
    for record in fits or ():
        if not isinstance(record, Mapping) or record.get("model") not in (MODEL, DRIFT):
            continue
        try:
            if record["model"] == MODEL:
                rows[str(record["key"])] = _row(record["row"])
            elif isinstance(record["drift"], (int, float)) and not isinstance(record["drift"], bool):
                drifts[str(record["key"])] = float(record["drift"])
        except (KeyError, TypeError, ValueError):
            continue
    return StoredFits(rows, drifts)


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
