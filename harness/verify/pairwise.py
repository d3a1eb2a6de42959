"""Cases by combination: a pairwise covering array over every axis an implementation declares.

A one-feature-at-a-time suite never meets a bug that needs two conditions at once (a
non-default scale *and* a mask, gradients *and* key padding, a GQA ratio of 7 *and* causal).
Here every value of every axis meets every value of every other axis in at least one case:
allpairspy builds the covering array, capabilities decide which axes and values apply (an
implementation without ``mask=True`` gets only mask "none"), and :func:`coverage` counts
the pairs a set of cases exercised, for the report.

Rows are turned into cases deterministically (allpairspy is deterministic for a given
input), so a suite is the same on every run and machine.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, cast

from allpairspy import AllPairs

from harness.case.attention import INPUTS, LAYOUTS, MASK_RANKS, AttentionCase, CaseFields
from harness.contract.registry import Implementation
from harness.results import Coverage
from harness.verify.structured import (
    apply_structure,
    expressible,
    invalid,
    masks_taken,
    structure_kinds,
    structure_label,
)

GQA = {1: (2, 2), 2: (4, 2), 3: (6, 2), 4: (8, 2), 7: (14, 2), 8: (16, 2), "mqa": (6, 1)}
"""GQA ratio -> (query heads, kv heads): 7 and 3 as real models use them (28/4, 6/2), 8 (Llama-3 70B's
64/8), and MQA."""
PAIRWISE_SOFTCAP = 5.0
"""The soft-cap value of the covering array's ``softcap`` axis: low enough that randn logits reach tanh's bend."""
PAIRWISE_DV = 40
"""V's head dim on the ``dv`` axis: above the array's smallest d, below its others, on no power of two."""
MASK_KINDS = ("none", "random", "key_padding", "key_padding_left", "key_padding_holes", "one_masked", "empty_rows",
              "key_padding_late", "first_block")


@dataclass(frozen=True)
class Axes:
    """The values of each axis for one suite size; capabilities then narrow them per implementation."""

    tq: tuple[int, ...]
    tk: tuple[int, ...]
    d: tuple[int, ...]
    batch: tuple[int, ...] = (1, 2)


QUICK = Axes(tq=(1, 15, 16, 33, 64, 127, 129), tk=(1, 17, 31, 64, 65, 128, 200), d=(8, 59, 80, 96, 128))
"""Tq and Tk with residues 0, 1, 15 and others modulo 16/32/64/128, Tq < = > Tk; d odd, between 64 and 128."""
FULL = Axes(tq=(1, 2, 15, 16, 33, 63, 64, 65, 127, 129, 255, 257), tk=(1, 17, 31, 32, 64, 65, 128, 200, 256, 300),
            d=(8, 16, 59, 64, 80, 96, 128, 256))
SUITE_AXES = {"quick": QUICK, "full": FULL}


def axes_for(impl: Implementation, suite: str) -> dict[str, list[Any]]:
    """Every axis and the values ``impl`` declares for it (a single value where it declares nothing)."""
    size = SUITE_AXES[suite]
    masks, ranks = masks_taken(impl, MASK_KINDS, MASK_RANKS)
    return {
        "dtype": list(impl.declared.dtypes),
        "scale": [None, 0.3, 1.0],
        "causal": [False, True] if impl.declared.causal else [False],
        "mask": list(masks),
        "mask_rank": list(ranks),
        "gqa": list(GQA) if impl.declared.gqa else [1],
        "tq": list(size.tq),
        "tk": list(size.tk),
        "d": list(size.d),
        "inputs": list(INPUTS),
        "layout": list(LAYOUTS),
        "grad": [False, True] if impl.declared.grad and impl.declared.backend == "torch" else [False],
        "batch": list(size.batch),
        "structure": structure_kinds(impl),
        "bias": ["none", "alibi"] if impl.declared.bias else ["none"],
        "aux_layout": list(LAYOUTS),
        "tensor_layout": tensor_layouts(impl),
        "sinks": [False, True] if impl.declared.sinks else [False],
        "softcap": [None, PAIRWISE_SOFTCAP] if impl.declared.softcap else [None],
        "dv": [0, PAIRWISE_DV] if impl.declared.value_dim else [0],
    }


def tensor_layouts(impl: Implementation) -> list[str]:
    """The values of the ``tensor_layout`` axis: "none", or the one array laid out unlike its group (q, k or v
    unlike ``layout``; the upstream gradient, mask, bias or index arrays unlike ``aux_layout``), among those
    ``impl`` is ever passed. A kernel that reads V with K's strides, or dO with the output's, passes whenever
    they agree."""
    values = ["none", "q", "k", "v"]
    values += ["dout"] if impl.declared.grad and impl.declared.backend == "torch" else []
    values += ["mask"] if impl.declared.mask else []
    values += ["bias"] if impl.declared.bias else []
    values += ["index"] if set(impl.declared.structures) & {"cache_seqlens", "varlen", "paged"} else []
    return values


def odd_layout(common: str) -> str:
    """The layout a ``tensor_layout`` array takes: transposed, or strided where its group is transposed."""
    return "strided" if common == "transposed" else "transposed"


def pair_problem(a: str, x: Any, b: str, y: Any) -> str | None:
    """Why values ``x`` of axis ``a`` and ``y`` of axis ``b`` cannot share a case, or None."""
    return row_problem({a: x, b: y})


def row_problem(values: dict[str, Any]) -> str | None:
    """Why the values of some axes (a pair, a partial row, a whole row) cannot share a case, or None: a mask rank
    without a mask, a soft-cap with a bias, a structure that the causal flag, the batch or gradients rule out."""
    if values.get("mask") == "none" and values.get("mask_rank", "full") != "full":
        return "a mask rank needs a mask"
    if values.get("softcap") is not None and values.get("bias", "none") != "none":
        return "a soft-cap with a bias: kernels differ in where the bias joins"
    if values.get("structure") is not None:
        return invalid(values["structure"], causal=values.get("causal", True), batch=values.get("batch", 1),
                       grad=values.get("grad", False))
    return None


def _valid_row(names: list[str]) -> Any:
    """allpairspy's filter, on partial rows too: the values so far can share a case (:func:`row_problem`)."""
    def valid(row: list[Any]) -> bool:
        return row_problem(dict(zip(names, row))) is None
    return valid


def _case(names: list[str], row: Iterable[Any], device: str, can: frozenset[str] = frozenset()) -> AttentionCase:
    values = dict(zip(names, row))
    heads, kv_heads = GQA[values.pop("gqa")]
    structure = values.pop("structure", "none")
    odd = values.pop("tensor_layout", "none")
    if odd != "none":
        common = values.get("layout", "contiguous") if odd in ("q", "k", "v") else values.get("aux_layout", "contiguous")
        values["layouts"] = ((odd, odd_layout(str(common))),)
    fields = apply_structure(structure, cast(CaseFields, values), can)  # the axes are case fields by name
    fields.update({"heads": heads, "kv_heads": kv_heads, "device": device, "kind": "kernel", "pairwise": True})
    return AttentionCase(**fields)


def _wanted(axes: dict[str, list[Any]]) -> set[tuple[Any, ...]]:
    """Every (axis, value, axis, value) pair a valid case can hold."""
    return {(a, x, b, y) for a, b in itertools.combinations(list(axes), 2) for x in axes[a] for y in axes[b]
            if not pair_problem(a, x, b, y)}


def _pairs(row: dict[str, object]) -> set[tuple[Any, ...]]:
    return {(a, row[a], b, row[b]) for a, b in itertools.combinations(list(row), 2)}


def _patch_row(axes: dict[str, list[Any]], pair: tuple[Any, ...], missing: set[tuple[Any, ...]]) -> dict[str, object]:
    """A valid row holding ``pair``, every other axis set greedily to the value that covers most missing pairs."""
    a, x, b, y = pair
    row: dict[str, object] = {a: x, b: y}
    for axis, values in axes.items():
        if axis in row:
            continue
        best, score = None, -1
        for value in values:
            if any(pair_problem(axis, value, other, v) for other, v in row.items()):
                continue
            gain = sum(((axis, value, o, v) in missing) or ((o, v, axis, value) in missing) for o, v in row.items())
            if gain > score:
                best, score = value, gain
        row[axis] = best if score >= 0 else values[0]
    return {axis: row[axis] for axis in axes}


def pairwise_rows(axes: dict[str, list[Any]]) -> list[dict[str, object]]:
    """allpairspy's rows, then greedy rows for the pairs its filter left out (a filter can cost pairs).
    Implementations with the same axes share one array (computed once per process)."""
    return [dict(row) for row in _rows(tuple((name, tuple(values)) for name, values in axes.items()))]


@functools.lru_cache(maxsize=64)
def _rows(key: tuple[tuple[str, tuple[Any, ...]], ...]) -> tuple[tuple[tuple[str, Any], ...], ...]:
    axes = {name: list(values) for name, values in key}
    names = list(axes)
    order = sorted(names, key=lambda n: -len(axes[n]))  # the largest axes first: about 15% fewer rows
    built = AllPairs([axes[n] for n in order], filter_func=_valid_row(order))
    rows = [{n: dict(zip(order, row))[n] for n in names} for row in built]
    seen = set().union(*(_pairs(r) for r in rows)) if rows else set()
    missing = _wanted(axes) - seen
    while missing:
        row = _patch_row(axes, min(missing, key=repr), missing)
        rows.append(row)
        missing -= _pairs(row)
    return tuple(tuple(row.items()) for row in rows)


def pairwise_cases(impl: Implementation, suite: str, device: str) -> list[AttentionCase]:
    """The covering array's cases for ``impl`` on ``device``: every pair of axis values at least once."""
    axes = axes_for(impl, suite)
    return [_case(list(row), row.values(), device, expressible(impl)) for row in pairwise_rows(axes)]


def case_values(case: AttentionCase, can: frozenset[str] | None = None) -> dict[str, object]:
    """A case's value on each axis (the inverse of the row -> case mapping, for coverage)."""
    ratio: Any = "mqa" if case.kv_heads == 1 and case.heads > 1 else case.heads // case.kv_heads
    return {"dtype": case.dtype, "scale": case.scale, "causal": case.causal, "mask": case.mask,
            "mask_rank": case.mask_rank, "gqa": ratio, "tq": case.tq, "tk": case.tk, "d": case.d,
            "inputs": case.inputs, "layout": case.layout, "grad": case.grad, "batch": case.batch,
            "structure": structure_label(case) if can is None else structure_label(case, can), "bias": case.bias,
            "aux_layout": case.aux_layout,
            "tensor_layout": case.layouts[0][0] if len(case.layouts) == 1 else "none",
            "sinks": case.sinks, "softcap": case.softcap, "dv": case.dv}


def coverage(impl: Implementation, suite: str, cases: Iterable[AttentionCase]) -> Coverage:
    """How many of the declared value pairs of ``suite`` that ``cases`` exercised."""
    axes = axes_for(impl, suite)
    wanted = _wanted(axes)
    seen: set[tuple[Any, ...]] = set()
    for case in cases:
        seen |= _pairs(case_values(case, expressible(impl)))
    covered = len(wanted & seen)
    return Coverage(covered=covered, total=len(wanted), fraction=covered / len(wanted) if wanted else 1.0,
                    axes={n: len(v) for n, v in axes.items()}, suite=suite)


REACH: dict[str, Callable[[AttentionCase], bool]] = {
    "causal": lambda case: bool(case.causal),
    "mask": lambda case: case.mask != "none",
    "gqa": lambda case: case.kv_heads != case.heads,
    "grad": lambda case: bool(case.grad),
    "bias": lambda case: case.bias != "none",
    "sinks": lambda case: bool(case.sinks),
    "softcap": lambda case: case.softcap is not None,
    "value_dim": lambda case: case.dv not in (0, case.d),
}
"""A declared capability flag -> whether a kernel case exercises it (a declared structure: the case uses it)."""


def declared_reach(impl: Implementation) -> list[str]:
    """The capabilities ``impl`` declares that a case can exercise: its flags in :data:`REACH`, then its
    structures (``structures=("window", ...)``)."""
    flags = [name for name in REACH if getattr(impl.declared, name, False)]
    return flags + [f"structure {name}" for name in impl.declared.structures]


def unreached(impl: Implementation, cases: Iterable[Any], *, by_dtype: bool = False) -> list[str]:
    """The capabilities ``impl`` declares that none of ``cases`` exercises (in any dtype); with ``by_dtype``, also
    "NAME in DTYPE" for each dtype of the cases in which a capability exercised elsewhere has no case (a sink
    that only float32 tests says nothing of a bfloat16 kernel's sinks)."""
    cases = list(cases)
    counts = reach(impl, cases)
    missing = [name for name, dtypes in counts.items() if not dtypes]
    if by_dtype:
        ran = sorted({c.dtype for c in cases if isinstance(c, AttentionCase)})
        missing += [f"{name} in {dtype}" for name, dtypes in counts.items() if dtypes
                    for dtype in ran if not dtypes.get(dtype)]
    return missing


def reach(impl: Implementation, cases: Iterable[Any]) -> dict[str, dict[str, int]]:
    """capability -> dtype -> how many of ``cases`` exercise it, for every capability ``impl`` declares: a pure
    function of the cases (the ones a run's cells say ran, or the ones a suite offers)."""
    counts: dict[str, dict[str, int]] = {name: {} for name in declared_reach(impl)}
    for case in cases:
        if not isinstance(case, AttentionCase):
            continue
        for name, dtypes in counts.items():
            exercised = (name.removeprefix("structure ") in case.structures if name.startswith("structure ")
                         else REACH[name](case))
            if exercised:
                dtypes[case.dtype] = dtypes.get(case.dtype, 0) + 1
    return counts
