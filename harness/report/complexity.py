"""Sweeps and scaling: which cells form a sweep along T, d or heads, and their fitted exponents.

A sweep is the set of cells that differ only along one axis (all other case fields and the
mode fixed). Of all candidate slices the one with the most points is the report's sweep,
preferring the forward pass without causal masking, so that a plot shows one clean line per
implementation. Exponents are the log-log slopes from :func:`harness.analysis.scaling.fit_exponent`,
which leaves out the small sizes where fixed overhead dominates and says which.

Theory: time grows as T^2, d and heads; peak memory as T^2 for an implementation that
materialises the (Tq, Tk) score matrix and as T for a tiled (FlashAttention-style) one. An
exponent further than :data:`TOLERANCE` from theory is flagged; for a tiled kernel's memory
only above it (O(T) is a bound; fixed-size tiles can dominate at small T).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from harness.analysis.scaling import MIN_POINTS  # fewer fitted sizes than this: shown, not judged

AXES = {"T": "tq", "d": "d", "heads": "heads", "window": "window_width", "Tk": "tk"}
"""Fit axes and their columns; ``window_width`` (left + right) is derived from the ``window`` column."""
FIXED = ("batch", "heads", "kv_heads", "tq", "tk", "d", "dtype", "device", "causal", "mask", "inputs",
         "layout", "bias", "kind", "mode", "window", "causal_align", "varlen", "cache_seqlens", "page_size",
         "node_kind")
"""A sweep holds these fixed: one kind of machine too (``node_kind``: a cluster run's cells are never
fitted or divided across machines)."""
TIME_THEORY = {"T": 2.0, "d": 1.0, "heads": 1.0, "window": 1.0, "Tk": 1.0}
"""Tk: decode steps (Tq < Tk, a KV cache of Tk keys): the work and the bytes read grow as Tk."""
WINDOW_TIME_THEORY = 1.0
"""Under a sliding window of fixed width the attended pairs, and the time of a kernel that skips the
blocks outside it, grow as T: cells with a window are fitted in a sweep of their own against this."""
TOLERANCE = 0.3
MEMORY = "peak_bytes"
"""The memory a call needs: its output plus bench's ``peak_extra_bytes`` (the extra at the peak,
above inputs and output). With the output counted, a tiled kernel is O(T) as FlashAttention
states it, and a materialising one O(T^2); the extra alone of a tiled kernel is a few tiles, O(1)."""

MEMORY_EXPONENT = {"quadratic": 2.0, "linear": 1.0}
"""Theory for peak memory in T, from the ``memory=`` each implementation declares at registration
(recorded by bench in the result file's "implementations")."""


@dataclass
class Sweep:
    axis: str
    """"T", "d" or "heads"."""
    column: str
    fixed: dict[str, Any]
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
    data = frame[(frame["status"] == "ok") & frame[value].notna()] if not frame.empty else frame
    for name, wanted in (("window", windowed), ("varlen", packed)):
        if name in data.columns:
            data = data[data[name].notna() == wanted]
        elif wanted:
            return None
    if data.empty:
        return None
    if axis == "window":  # the window's width at fixed T: pairs, and a banded kernel's time, grow as the width
        if not windowed or data.empty:
            return None
        data = data.assign(window_width=[sum(int(x) for x in str(w).split(",")) for w in data["window"]])
    if axis == "T":
        data = data[data["tq"] == data["tk"]]
    if axis == "Tk":  # decode: a few queries against a growing cache
        data = data[data["tq"] < data["tk"]]
    if axis == "heads":
        data = data[data["kv_heads"] == data["heads"]]
    fixed = [c for c in FIXED if c != column and not (axis == "T" and c == "tk") and not (axis == "window" and c == "window")
             and not (axis == "heads" and c == "kv_heads") and c in data.columns]
    if data.empty:
        return None
    keys = pd.Series(["|".join(map(str, row)) for row in data[fixed].itertuples(index=False)], index=data.index)
    best: tuple[Any, ...] | None = None
    for key, group in data.groupby(keys):
        counts = group.groupby("implementation")[column].nunique()
        points = int(counts[counts >= 2].sum())
        if points == 0:
            continue
        first = group.iloc[0]
        score = (points, first["mode"] == "fwd", str(first["causal"]) != "True", str(first["mask"]) == "none")
        if best is None or score > best[0]:
            best = (score, key, group)
    if best is None:
        return None
    group = best[2].sort_values(["implementation", column])
    first = group.iloc[0]
    return Sweep(axis=axis, column=column, fixed={c: first[c] for c in fixed}, frame=group, windowed=windowed,
                 packed=packed)


def memory_theory(name: str, info: dict[str, Any] | None = None) -> float | None:
    """2 for an implementation that declared memory="quadratic", 1 for "linear", None when undeclared."""
    info = info or {}
    if isinstance(info.get("memory_exponent"), (int, float)):
        return float(info["memory_exponent"])
    return MEMORY_EXPONENT.get(str(info.get("memory")))


@dataclass
class Row:
    implementation: str
    quantity: str
    """"time" or "memory"."""
    axis: str
    slope: float | None
    r2: float | None
    n: int
    theory: float | None
    excluded: list[Any] = field(default_factory=list)
    sweep: str = ""

    @property
    def off_by(self) -> float | None:
        if self.slope is None or self.theory is None:
            return None
        return self.slope - self.theory

    @property
    def judged(self) -> bool:
        """Theory is known and enough sizes were fitted to hold the slope to it."""
        return self.off_by is not None and self.n >= MIN_POINTS

    @property
    def upper_bound_only(self) -> bool:
        """A tiled kernel's O(T) memory is a bound: its fixed-size tiles may dominate at the sizes run
        (a slope below 1), which is no fault; only growth faster than T is."""
        return self.quantity == "memory" and self.theory == MEMORY_EXPONENT["linear"]

    @property
    def flagged(self) -> bool:
        if not self.judged:
            return False
        off = self.off_by or 0.0
        return off > TOLERANCE if self.upper_bound_only else abs(off) > TOLERANCE

    @property
    def check(self) -> str:
        if self.theory is None:
            return "no theory"
        if not self.judged:
            return f"n<{MIN_POINTS}"
        if self.flagged:
            return "OFF"
        return f"ok (≤ {self.theory:g})" if self.upper_bound_only and (self.off_by or 0) < -TOLERANCE else "ok"

    def as_dict(self) -> dict[str, Any]:
        return {"implementation": self.implementation, "quantity": self.quantity, "axis": self.axis,
                "slope": self.slope, "theory": self.theory, "off_by": self.off_by, "flagged": self.flagged,
                "check": self.check,
                "r2": self.r2, "n": self.n, "excluded": self.excluded, "sweep": self.sweep}


def fit_rows(s: Sweep, quantity: str, value: str,
             implementations: dict[str, dict[str, Any]] | None = None) -> list[Row]:
    """One fitted exponent per implementation along the sweep's axis."""
    from harness.analysis.scaling import fit_exponent

    rows = []
    for name, group in s.frame.groupby("implementation", sort=True):
        group = group[group[value] > 0]
        if group[s.column].nunique() < 2:
            continue
        fit = fit_exponent([float(x) for x in group[s.column]], [float(y) for y in group[value]])
        theory: float | None
        if quantity == "time":
            theory = WINDOW_TIME_THEORY if s.windowed and s.axis == "T" else TIME_THEORY[s.axis]
        else:
            theory = memory_theory(str(name), (implementations or {}).get(str(name)))
        slope = getattr(fit, "slope", None)
        rows.append(Row(implementation=str(name), quantity=quantity, axis=s.axis,
                        slope=None if slope is None or math.isnan(slope) else float(slope),
                        r2=getattr(fit, "r2", None), n=int(getattr(fit, "n", len(group))), theory=theory,
                        excluded=[_size(p) for p in getattr(fit, "excluded", []) or []], sweep=s.label))
    return rows


def _size(point: Any) -> Any:
    """An excluded point is (x, y); the report names only its size x."""
    x = point[0] if isinstance(point, (tuple, list)) else point
    return int(x) if float(x).is_integer() else x


def complexity_table(bench: pd.DataFrame, implementations: dict[str, dict[str, Any]] | None = None) -> list[Row]:
    """Time exponents in T, d and heads, and the memory exponent in T, for every implementation."""
    rows: list[Row] = []
    if bench.empty:
        return rows
    for axis in ("T", "d", "heads", "Tk"):
        s = sweep(bench, axis, "median")
        if s is not None:
            rows += fit_rows(s, "time", "median", implementations)
    s = sweep(bench, "T", MEMORY)
    if s is not None:
        rows += fit_rows(s, "memory", MEMORY, implementations)
    for s in (sweep(bench, "T", "median", windowed=True),  # sliding-window cells: their own T sweep, theory T^1
              sweep(bench, "window", "median", windowed=True),  # and against the width at fixed T, theory 1
              sweep(bench, "T", "median", packed=True)):   # packed sequences: their own, theory T^2
        if s is not None:
            rows += fit_rows(s, "time", "median", implementations)
    order = {"time": 0, "memory": 1}
    return sorted(rows, key=lambda r: (r.implementation, order[r.quantity], list(AXES).index(r.axis)))
