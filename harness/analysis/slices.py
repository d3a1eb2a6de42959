"""Which bench cells form a sweep: the largest slice of cells that differ along one axis only.

A sweep is the set of cells that differ only along one axis (all other case fields, the mode and the kind of
machine fixed). Of all candidate slices the one with the most points is the sweep, preferring the forward pass
without causal masking, so that a plot shows one clean line per implementation. The axes and their case fields
are :data:`harness.analysis.scaling.AXES`; the sweeps looked for, and their fits, :mod:`harness.analysis.sweepfits`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pandas as pd

from harness.analysis.scaling import AXES as FIT_AXES  # the axes, their case fields and theory: defined once
from harness.analysis.scaling import Axis

AXES = {name: "window_width" if name == "window" else axis.size for name, axis in FIT_AXES.items()}
"""Fit axes and the column each is plotted and fitted against; ``window_width`` (left + right) is the typed
window's width (:func:`harness.analysis.points.point_columns`)."""
FIXED = ("batch", "heads", "kv_heads", "tq", "tk", "d", "dtype", "device", "causal", "mask", "inputs",
         "layout", "bias", "kind", "mode", "window", "causal_align", "varlen", "cache_seqlens", "page_size",
         "node_kind")
"""A sweep holds these fixed, but for its axis's own fields: one kind of machine too (``node_kind``: a cluster
run's cells are never fitted or divided across machines)."""


@dataclass
class Sweep:
    axis: str
    """"T", "d" or "heads"."""
    column: str
    fixed: dict[str, object]
    frame: pd.DataFrame
    windowed: bool = False
    """Cells with a sliding window (time theory :data:`WINDOW_TIME_THEORY` in T)."""
    packed: bool = False
    """Cells of packed sequences (varlen; lengths proportional to T, so the work still grows as T^2)."""

    @property
    def label(self) -> str:
        f = self.fixed
        names = {"tq": "T" if "tk" in f and f.get("tk") == f.get("tq") else "Tq", "tk": "Tk", "d": "d",
                 "heads": "H", "batch": "B"}
        if f.get("tk") == f.get("tq") or "tk" not in f:
            names.pop("tk")
        parts = [f"{short}={f[col]}" for col, short in names.items() if col in f]
        extras = [str(f.get("dtype", "")), str(f.get("mode", ""))]
        if f.get("causal") in (True, "True"):
            extras.append("causal")
        if _set(f.get("window")):
            extras.append(f"window={f['window']}")
        if f.get("causal_align") not in (None, "top_left"):
            extras.append(str(f["causal_align"]))
        if _set(f.get("varlen")):
            extras.append(f"varlen={f['varlen']}")
        if f.get("mask") not in (None, "none"):
            extras.append(f"mask={f['mask']}")
        if isinstance(f.get("node_kind"), str):
            extras.append(f"on {f['node_kind']}")
        return ", ".join(parts + [e for e in extras if e])


def _set(value: Any) -> bool:
    """A structure column holds a value (pandas reads a missing one as None or NaN)."""
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def sweep(frame: pd.DataFrame, axis: str, value: str = "median", windowed: bool = False,
          packed: bool = False) -> Sweep | None:
    """The largest slice of ``frame`` that varies along ``axis`` only (None when there is none), among
    the cells with a sliding window (``windowed``) or those without, of packed sequences (``packed``) or not."""
    column = AXES[axis]
    data = _on_axis(_measured(frame, value, windowed, packed), FIT_AXES[axis], windowed)
    if data is None or data.empty:
        return None
    fixed = [c for c in FIXED if c != column and c not in FIT_AXES[axis].fields and c in data.columns]
    keys = pd.Series(["|".join(map(str, row)) for row in data[fixed].itertuples(index=False)], index=data.index)
    best = _largest_slice(data, keys, column)
    if best is None:
        return None
    return named_sweep(data[keys == best], axis, windowed=windowed, packed=packed)


def named_sweep(frame: pd.DataFrame, axis: str, windowed: bool = False, packed: bool = False) -> Sweep:
    """The sweep along ``axis`` made of exactly the cells of ``frame`` (found by :func:`sweep`, or named by the
    fits a file stored): its points in order and what it holds fixed, read off its first cell."""
    column = AXES[axis]
    fixed = [c for c in FIXED if c != column and c not in FIT_AXES[axis].fields and c in frame.columns]
    group = frame.sort_values(["implementation", column])
    first = group.iloc[0]
    return Sweep(axis=axis, column=column, fixed={c: first[c] for c in fixed}, frame=group, windowed=windowed,
                 packed=packed)


def _measured(frame: pd.DataFrame, value: str, windowed: bool, packed: bool) -> pd.DataFrame | None:
    """The ok cells with a ``value``, with a sliding window or without (``windowed``), packed or not (``packed``);
    None when the frame has no structure column that the wanted cells need."""
    data = frame[(frame["status"] == "ok") & frame[value].notna()] if not frame.empty else frame
    for name, wanted in (("window", windowed), ("varlen", packed)):
        if name in data.columns:
            data = data[data[name].notna() == wanted]
        elif wanted:
            return None
    return data


def _on_axis(data: pd.DataFrame | None, axis: Axis, windowed: bool) -> pd.DataFrame | None:
    """The cells that lie on ``axis`` (:meth:`Axis.holds`) with a positive size (a log axis: a size of 0, from
    a damaged file, is no point); along a window's width, only windowed cells."""
    if data is None or data.empty:
        return None
    if axis.name == "window":  # the window's width at fixed T: pairs, and a banded kernel's time, grow as the width
        if not windowed:
            return None
    if axis.name in ("T", "Tk"):
        data = data[(data["tq"] == data["tk"]) if axis.name == "T" else (data["tq"] < data["tk"])]
    if axis.name == "heads":
        data = data[data["kv_heads"] == data["heads"]]
    column = AXES[axis.name]
    return data[pd.to_numeric(data[column], errors="coerce") > 0]


def _largest_slice(data: pd.DataFrame, keys: pd.Series, column: str) -> str | None:
    """The key of the slice with the most points (sizes summed over its implementations with two or more),
    preferring the forward pass, no causal masking and no mask; None when no slice has two sizes."""
    # one pass over the cells (a sweep of n sizes along d has n slices: one groupby each would be slow)
    counts = data.groupby([keys, data["implementation"]])[column].nunique()
    points = counts[counts >= 2].groupby(level=0).sum()
    if points.empty:
        return None
    firsts = data.loc[~keys.duplicated()].set_axis(keys[~keys.duplicated()])

    def score(key: str) -> tuple[int, bool, bool, bool]:
        first = firsts.loc[key]
        return (int(points[key]), first["mode"] == "fwd", str(first["causal"]) != "True", str(first["mask"]) == "none")

    return str(max(sorted(points.index), key=score))
