"""Scaling verdicts on synthetic fits and paired ratios (deterministic: no timing, no machine).

What is flagged is a cost that grows faster than the algorithm's by an order (a planted O(T^3), memory that
materialises T x T under memory="linear"); a real kernel's bounded departure (a cache step, a block size) is
described, not flagged; where the interval cannot tell theory from its neighbour the row says "undecided"; and
growth relative to a reference timed beside the cells reads the same whatever the load did between cells.
"""

from __future__ import annotations

import pandas as pd
import pytest

from harness.analysis.costmodel import CostFit
from harness.analysis.growth import Relative, Row, largest_rate_fall, relative_growth
from harness.analysis.slices import sweep
from harness.analysis.sweepfits import fit_rows

TS = (256.0, 512.0, 1024.0, 2048.0)


def _fit(exponent: float, low: float, high: float, ys: tuple[float, ...], xs: tuple[float, ...] = TS) -> CostFit:
    return CostFit(exponent=exponent, low=low, high=high, lower_terms=(0,), coefs=(0.0, 1.0), xs=xs, ys=ys,
                   regimes=("lead",) * len(xs), r2=0.99)


def _row(fit: CostFit, theory: float = 2.0, quantity: str = "time", axis: str = "T",
         relative: Relative | None = None) -> Row:
    return Row(implementation="k", quantity=quantity, axis=axis, theory=theory, fit=fit, relative=relative)


def test_a_planted_cubic_is_flagged_from_its_own_tight_fit() -> None:
    row = _row(_fit(3.0, 2.8, 3.2, tuple(t ** 3 for t in TS)))
    assert row.flagged and row.check == "OFF"


def test_a_cache_step_is_described_as_a_departure_not_flagged() -> None:
    ys = tuple(t ** 2 * (1.6 if t == 2048 else 1.0) for t in TS)  # one step: the scores leave the cache
    row = _row(_fit(2.2, 2.05, 2.4, ys))
    assert not row.flagged
    assert row.check == "departure: per-FLOP rate falls 38% from T 1024 to 2048"


def test_a_departure_along_d_names_the_sizes() -> None:
    ds = (32.0, 64.0, 128.0)
    row = _row(_fit(1.3, 1.1, 1.5, (32.0, 64.0, 128.0 / 0.6), ds), theory=1.0, axis="d")
    assert row.check == "departure: per-FLOP rate falls 40% from d 64 to 128" and not row.flagged


def test_an_interval_holding_theory_and_its_neighbour_is_undecided() -> None:
    row = _row(_fit(2.4, 1.3, 4.0, tuple(t ** 2 for t in TS)))
    assert not row.flagged and row.undecided and row.check.startswith("undecided")
    assert _row(_fit(2.02, 1.9, 2.1, tuple(t ** 2 for t in TS))).check == "ok"


def test_memory_that_materialises_t_by_t_under_linear_is_flagged() -> None:
    row = _row(_fit(2.0, 1.95, 2.05, tuple(t ** 2 for t in TS)), theory=1.0, quantity="memory")
    assert row.flagged and row.check == "OFF"
    tiles = _row(_fit(0.3, 0.1, 0.6, (1.0, 1.1, 1.3, 1.8)), theory=1.0, quantity="memory")
    assert not tiles.flagged  # O(T) is a bound: fixed-size tiles below it are no fault


def test_tiles_growing_with_t_below_their_block_size_are_a_memory_departure_a_score_matrix_is_flagged() -> None:
    """torch_sdpa's CPU kernel at tiny sizes (d = 8, T 128..1024): its per-thread tiles grow with T until T reaches
    the block size, so its peak grows faster than T while holding a tenth of one head's T x T scores; a kernel that
    keeps the scores (4 T^2 bytes in float32) holds the whole matrix and is flagged at the same sizes."""
    ts = (128.0, 256.0, 512.0, 1024.0)
    scores = 4.0 * 1024 * 1024  # one head's float32 T x T at T = 1024
    sdpa = (28_672.0, 77_824.0, 114_688.0, 409_600.0)  # measured peak bytes (output + extra), a cold CI run's shape
    tiles = Row(implementation="torch_sdpa", quantity="memory", axis="T", theory=1.0,
                fit=_fit(1.6, 1.2, 2.0, sdpa, ts), scores_bytes=scores)
    assert not tiles.flagged and tiles.departure is not None
    assert tiles.check == ("departure: memory grows faster than T yet holds 10% of one head's T×T scores at T 1024: "
                           "tiles growing with T below their block size, no score matrix")
    held = tuple(2 * 4.0 * t * t for t in ts)  # scores and their softmax: twice the matrix
    matrix = Row(implementation="planted", quantity="memory", axis="T", theory=1.0,
                 fit=_fit(2.0, 1.95, 2.05, held, ts), scores_bytes=scores)
    assert matrix.flagged and matrix.check == "OFF" and matrix.departure is None


def _ratios(growth: float, spread: float) -> tuple[list[float], list[float], list[float]]:
    mid = [(t / TS[0]) ** growth for t in TS]
    return mid, [m / (1 + spread) for m in mid], [m * (1 + spread) for m in mid]


@pytest.mark.parametrize("spread", [0.05, 0.3])  # idle, and a load that widens each paired interval to +-30%
def test_paired_growth_flags_a_cubic_and_passes_a_builtin_whatever_the_load(spread: float) -> None:
    loaded = _fit(2.5, 1.3, 4.0, (1.0, 9.0, 20.0, 70.0))  # the kernel's own fit under load: says little
    cubic = relative_growth(TS, *_ratios(1.0, spread), "torch_sdpa")
    honest = relative_growth(TS, *_ratios(0.1, spread), "torch_sdpa")
    assert cubic is not None and honest is not None
    assert cubic.exponent == pytest.approx(1.0) and honest.exponent == pytest.approx(0.1)
    assert _row(loaded, relative=cubic).flagged
    assert _row(loaded, relative=cubic).check.startswith("OFF: grows T^1.00 faster than torch_sdpa")
    assert not _row(loaded, relative=honest).flagged


def test_relative_growth_needs_three_sizes() -> None:
    assert relative_growth(TS[:2], [1.0, 2.0], [0.9, 1.8], [1.1, 2.2], "r") is None


def test_the_largest_rate_fall() -> None:
    assert largest_rate_fall((1.0, 2.0, 4.0), (1.0, 2.0, 4.0), 1.0) is None
    assert largest_rate_fall((1.0, 2.0, 4.0), (1.0, 4.0, 8.0), 1.0) == (1.0, 2.0, 0.5)


def _frame(growth: float) -> pd.DataFrame:
    """Bench rows of a T sweep: a kernel paired with torch_sdpa in rounds, its ratio growing as T^growth."""
    rows = []
    for t in TS:
        ratio = (t / TS[0]) ** growth
        for name, median, paired in (("torch_sdpa", 1e-9 * t ** 2, None), ("k", 1e-9 * t ** 2 * ratio, ratio)):
            rows.append({"implementation": name, "status": "ok", "median": median, "tq": int(t), "tk": int(t),
                         "d": 64, "heads": 8, "kv_heads": 8, "batch": 1, "dtype": "float32", "device": "cpu",
                         "causal": False, "mask": "none", "mode": "fwd", "window": None, "varlen": None,
                         "reference": None if paired is None else "torch_sdpa", "ratio_to_ref": paired,
                         "ratio_low": None if paired is None else paired * 0.8,
                         "ratio_high": None if paired is None else paired * 1.25})
    return pd.DataFrame(rows)


def test_fit_rows_read_the_paired_ratios_of_a_sweep() -> None:
    for growth, flagged in ((1.0, True), (0.0, False)):
        s = sweep(_frame(growth), "T")
        assert s is not None
        rows = {r.implementation: r for r in fit_rows(s, "time", "median")}
        assert rows["k"].relative is not None and rows["k"].relative.reference == "torch_sdpa"
        assert rows["k"].flagged is flagged
        assert rows["torch_sdpa"].relative is None and not rows["torch_sdpa"].flagged


def test_an_honest_d_exponent_with_a_wide_interval_is_a_departure() -> None:
    # torch_sdpa on a quieter machine: d 1.83 [1.33, 2.37]: not an order beyond d^1
    ds = (32.0, 64.0, 128.0)
    row = _row(_fit(1.83, 1.33, 2.37, (1.0, 2.6, 7.1), ds), theory=1.0, axis="d")
    assert not row.flagged and row.check.startswith("departure: per-FLOP rate falls")


def test_a_tight_excess_concentrated_in_one_step_is_a_departure_and_a_sustained_one_is_flagged() -> None:
    cliff = tuple(t ** 2 * (3.5 if t == 2048 else 1.0) for t in TS)  # one step of x^3.8, the others x^2
    row = _row(_fit(2.6, 2.55, 2.65, cliff))
    assert not row.flagged and row.check.startswith("departure")
    ds = (32.0, 64.0, 128.0)
    planted = _row(_fit(2.0, 1.9, 2.1, (1.0, 4.0, 16.0), ds), theory=1.0, axis="d")  # time grows as d^2
    assert planted.flagged


def test_a_paired_ratio_that_jumps_once_is_not_flagged() -> None:
    ratios = [1.0, 1.0, 1.05, 4.0]  # one cliff between the two largest sizes, tight intervals
    relative = relative_growth(TS, ratios, [r * 0.97 for r in ratios], [r * 1.03 for r in ratios], "torch_sdpa")
    assert relative is not None and relative.low > 0.5
    assert not _row(_fit(2.5, 1.3, 4.0, (1.0, 4.0, 17.0, 200.0)), relative=relative).flagged
