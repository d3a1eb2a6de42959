"""The cells a stored fit names: which bench cells of its file a cost-model fit in ``Run.fits`` was fitted from.

A fit record (``{"model": "cost", ..., "cells": [...]}``) lists each cell by its key (implementation, case id,
mode) and its position in the file's ``cells``. Cells are append-only and a later cell with the same key
replaces an earlier one, so a named cell still matches exactly when the file's live cell of that key is at
the named position: a reader of one complete file takes the fit as it is, without finding the sweep again;
a cell measured again since (another position) or gone tells it to fit afresh. Files from before fits named
their cells read as before: their records have no ``cells`` and are fitted again where their key does not match.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from harness.results.cells import BenchCell, Cell, CellKey


@dataclass(frozen=True)
class FittedCell:
    """One cell a fit read: its key and its place in the file's cells."""

    key: CellKey
    position: int

    def to_json(self) -> dict[str, Any]:
        return {"implementation": self.key.implementation, "case_id": self.key.case_id, "mode": self.key.variant,
                "position": self.position}

    @classmethod
    def from_json(cls, data: object) -> FittedCell:
        """The named cell; a ValueError for anything that is not one (the fit is then fitted again)."""
        if not isinstance(data, Mapping):
            raise ValueError(f"a fitted cell must be an object, not {data!r}")
        names, position = [data.get(k) for k in ("implementation", "case_id", "mode")], data.get("position")
        if not all(isinstance(n, str) for n in names) or isinstance(position, bool) or not isinstance(position, int):
            raise ValueError(f"a fitted cell needs string implementation, case_id, mode and an int position: {data!r}")
        return cls(CellKey("bench", str(names[0]), str(names[1]), str(names[2])), position)


def live_positions(cells: Iterable[Cell]) -> dict[CellKey, int]:
    """Each bench cell's key and the position of its live cell in the file (the last one with that key)."""
    return {cell.key: i for i, cell in enumerate(cells) if isinstance(cell, BenchCell)}


def fitted_cells(record: Mapping[str, Any]) -> tuple[FittedCell, ...] | None:
    """The cells a stored fit record names (None for a record that names none, or names them damaged)."""
    named = record.get("cells")
    if not isinstance(named, list) or not named:
        return None
    try:
        return tuple(FittedCell.from_json(c) for c in named)
    except ValueError:
        return None


def still_live(named: Iterable[FittedCell], live: Mapping[CellKey, int]) -> bool:
    """Whether every named cell is still the file's live cell of its key (none measured again, none gone)."""
    return all(live.get(cell.key) == cell.position for cell in named)
