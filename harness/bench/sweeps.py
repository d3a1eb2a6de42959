"""Bench suites (which cells to run) and the budget check that skips cells too big to attempt.

A suite is a list of sweeps; a sweep is a cross product of axis values. ``quick`` sweeps T
at d = 64, H = 8 for every implementation (the T exponent and the memory slope), and d over
32/64/128 and heads over 1/4/16 at T = 1024 for the main implementations (:data:`MAIN`), so
the main job shows the whole O(T^2 d H) in a few minutes;
``full`` sweeps T from 128 to 8192, d over 32/64/128 and heads over 1/4/8/16, one axis at a
time with the others at their middle value, causal on and off, forward and forward+backward;
``window`` sweeps T from 2048 to 16384 under a causal sliding window of 256 (:data:`WINDOW`), where
the work, and the time of a kernel that skips blocks outside the window, grows as T, beside dense
causal at the same T, and the window's width at T = 8192 (:data:`WINDOW_WIDTHS`); ``varlen`` packs
16 sequences of ragged lengths (:func:`ragged`) summing to T = 2048 .. 16384, block-diagonal.
An axis flag (``--T 512 1024``) replaces that axis's values in every sweep of the suite;
cells that come out twice run once. A sweep that names ``implementations`` runs for those only,
and only when no axis flag is given: ``--T 512 1024`` asks for a T sweep, not for d and heads too.

Before a cell runs its cost is predicted: from the cells of the same implementation, mode,
dtype and causality measured so far in this run (a power law through the last measured
size); without those, from the FLOP rate this run measured (the implementation's own in other
modes, else the other implementations'), and with nothing measured yet from 5% of the GEMM
peak. Cells predicted to exceed the memory budget (default half of the free RAM) are recorded
as skipped with the prediction and the limit. The per-cell time budget applies to the cells a
suite generates; cells the user named on the command line (any axis flag such as ``--T``)
always run, with their prediction recorded, unless ``--cell-budget`` is given too. Cells run
smallest first, so the predictions have history.

It is one module because the suites are data (the tables of sizes the main job's verdicts
need) and the budget reads every field of them: planning and the prediction share one cell type.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.bench.timing import TimingConfig
from harness.case.attention import AttentionCase
from harness.case.decode import decode_fields
from harness.case.dtypes import itemsize
from harness.errors import UsageError
from harness.reference.flops import MODES, attention_flops, work_g
from harness.results.schema import CellKey

AXES = ("T", "d", "heads", "batch", "dtype", "causal", "mode")

MAIN = ("numpy_naive", "torch_eager", "torch_sdpa", "tiled", "tiled_fused")
"""The implementations the quick suite also sweeps along d and heads (the others: T only)."""
_QUICK_FIXED = {"batch": (1,), "dtype": ("float32",), "causal": (False,), "mode": ("fwd",)}

WINDOW = (256, 0)
"""The window suite's sliding window: causal with 256 keys to the left (Mistral-style local attention)."""
WINDOW_WIDTHS = (64, 128, 256, 512, 1024, 2048)
"""The window suite's widths (keys to the left, causal) at T = 8192: time against the window."""

RAGGED_WEIGHTS = tuple((i * 5) % 16 + 4 for i in range(16))
"""Relative lengths of the varlen suite's 16 packed sequences (4 .. 19, shuffled): ragged, never tiny."""


def ragged(total: int, weights: Sequence[int] = RAGGED_WEIGHTS) -> tuple[tuple[int, int], ...]:
    """``len(weights)`` (query length, key length) pairs, self-attention, proportional to the weights and
    summing to ``total`` (the last takes the rounding): the packed sequences of the varlen suite."""
    cuts = [round(total * sum(weights[:i]) / sum(weights)) for i in range(len(weights) + 1)]
    return tuple((b - a, b - a) for a, b in zip(cuts, cuts[1:]))


DECODE_MAIN = ("torch_sdpa", "tiled_decode")
"""The implementations the main job's small decode sweep runs (the roofline's decode points)."""
_DECODE = {"mode": ("fwd",), "dtype": ("float32",)}


def _decode_suite() -> list[dict[str, Any]]:
    """Decode steps, fp32 queries: Tk up to 65,536, batch 1..64, GQA and MQA, Tq 1..16, ragged and paged caches;
    fp32 caches and, beside the main points, bf16 ones."""
    gqa = (32, 8)
    cases = [decode_fields(1, *gqa, tk) for tk in (1024, 4096, 16384, 65536)]  # time vs Tk: theory 1
    cases += [decode_fields(b, *gqa, 4096) for b in (8, 64)]  # batch
    cases += [decode_fields(8, *gqa, 8192, tq=tq) for tq in (2, 4, 16)]  # a few new queries, bottom-right causal
    cases += [decode_fields(8, *gqa, 32768), decode_fields(1, 32, 1, 32768)]  # the targets: GQA B8, MQA B1
    cases += [decode_fields(8, *gqa, 16384, ragged=True), decode_fields(8, *gqa, 16384, page_size=16),
              decode_fields(8, *gqa, 16384, ragged=True, page_size=16), decode_fields(8, *gqa, 16384)]
    # bf16 caches beside fp32 ones (fp32 queries): the steps inference runs, half the bytes
    cases += [decode_fields(1, *gqa, tk, kv_dtype="bfloat16") for tk in (4096, 65536)]
    cases += [decode_fields(8, *gqa, 32768, kv_dtype="bfloat16"), decode_fields(1, 32, 1, 32768, kv_dtype="bfloat16"),
              decode_fields(8, *gqa, 16384, ragged=True, page_size=16, kv_dtype="bfloat16")]
    return [{"cases": tuple(cases), **_DECODE}]


SUITES: dict[str, list[dict[str, Any]]] = {
    "quick": [
        {"T": (256, 512, 1024, 2048), "d": (64,), "heads": (8,), **_QUICK_FIXED},
        # memory is fitted along T only: the d, heads and decode sweeps time their cells without a memory run
        {"T": (1024,), "d": (32, 64, 128), "heads": (8,), **_QUICK_FIXED, "implementations": MAIN, "memory": False},
        {"T": (1024,), "d": (64,), "heads": (1, 4, 8, 16), **_QUICK_FIXED, "implementations": MAIN, "memory": False},
        # a small decode sweep, so the default report's roofline has points under the bandwidth roof: two steps
        # whose caches (67 MB of K and V each) are beyond any L3, at a quarter of the bytes of a B4 Tk 8192 step
        {"cases": (decode_fields(4, 32, 8, 2048), decode_fields(1, 32, 8, 8192)), **_DECODE,
         "implementations": DECODE_MAIN, "memory": False},
    ],
    "full": [
        {"T": tuple(2 ** i for i in range(7, 14)), "d": (64,), "heads": (8,)},
        {"T": (1024,), "d": (32, 64, 128), "heads": (8,)},
        {"T": (1024,), "d": (64,), "heads": (1, 4, 8, 16)},
    ],
    # a causal sliding window at fixed width: the work grows as T, so should a kernel that skips blocks;
    # an implementation without native windows gets the window as a dense (T, T) mask
    "window": [
        {"T": (2048, 4096, 8192, 16384), "d": (64,), "heads": (8,), "batch": (1,), "dtype": ("float32",),
         "causal": (True,), "mode": ("fwd",), "structure": {"window": WINDOW}},
        # beside it, dense causal at the same T (the report draws them together)
        {"T": (2048, 4096, 8192, 16384), "d": (64,), "heads": (8,), "batch": (1,), "dtype": ("float32",),
         "causal": (True,), "mode": ("fwd",)},
        # time against the window's width at one T (O(T * window) while the window is much narrower than T)
        {"T": (8192,), "d": (64,), "heads": (8,), "batch": (1,), "dtype": ("float32",), "causal": (True,),
         "mode": ("fwd",), "structure": [{"window": (w, 0)} for w in WINDOW_WIDTHS]},
    ],
    # 16 packed sequences of ragged lengths (block-diagonal, FlashAttention's varlen): the work is the sum
    # of the squares of the lengths; an implementation without native varlen gets the dense (T, T) mask
    "varlen": [
        {"T": (2048, 4096, 8192, 16384), "d": (64,), "heads": (8,), "batch": (1,), "dtype": ("float32",),
         "causal": (False,), "mode": ("fwd",), "structure": {"varlen": ragged}},
    ],
    "decode": _decode_suite(),
}
FULL_DEFAULTS = {"batch": (1,), "dtype": ("float32",), "causal": (False, True), "mode": ("fwd", "fwd+bwd")}
SUITE_TIMING: dict[str, TimingConfig] = {"quick": TimingConfig(budget_s=0.4, min_samples=5),
                                         "full": TimingConfig(budget_s=1.0, min_samples=7),
                                         "window": TimingConfig(budget_s=0.4, min_samples=5),
                                         "varlen": TimingConfig(budget_s=0.4, min_samples=5),
                                         "decode": TimingConfig(budget_s=0.5, min_samples=5)}
SUITE_CELL_BUDGET_S = {"quick": 20.0, "full": 120.0, "window": 30.0, "varlen": 30.0, "decode": 30.0}


@dataclass(frozen=True)
class PlannedCell:
    """One (implementation, case, mode) to measure."""

    implementation: str
    case: AttentionCase
    mode: str
    memory: bool = True
    """Whether its peak memory is measured (bench's settings permitting): False where no sweep that wants it
    (``"memory": False`` in a suite's sweep: the report fits memory along T only) holds the cell."""

    @property
    def key(self) -> CellKey:
        """The key of the cell this plan makes (``BenchCell.key``): what --resume compares."""
        return CellKey("bench", self.implementation, self.case.id, self.mode)


def sweep_cases(suite: str, overrides: Mapping[str, Sequence[Any]] | None = None,
                device: str = "cpu") -> list[tuple[AttentionCase, str]]:
    """(case, mode) pairs of a suite with axis overrides applied, deduplicated, in order."""
    return [(case, mode) for case, mode, _ in _sweep_cells(suite, overrides, device)]


Planned = tuple[AttentionCase, str, frozenset[str] | None]
"""(case, mode, the implementations it is for, None for all)."""


def _sweep_cells(suite: str, overrides: Mapping[str, Sequence[Any]] | None, device: str,
                 memory_only: bool = False) -> list[Planned]:
    """(case, mode, the implementations it is for, None for all), deduplicated, in order: a case that two sweeps
    make is one cell, for the implementations of both; ``memory_only``: of the sweeps whose cells get a memory run."""
    overrides = _checked_overrides(suite, overrides)
    if "workload" in overrides:
        return [(case, mode, None) for case, mode in _workload_cells(overrides, device)]
    seen: dict[tuple[str, str], Planned] = {}
    for sweep in SUITES[suite]:
        if memory_only and not sweep.get("memory", True):
            continue
        only = sweep.get("implementations")
        if only is not None and overrides:
            continue
        for case, mode in _explicit_cells(sweep, overrides, device) if "cases" in sweep else _grid_cells(sweep, overrides, device):
            before = seen.get((case.id, mode), (case, mode, frozenset()))[2]
            seen[(case.id, mode)] = (case, mode, None if only is None or before is None else before | frozenset(only))
    return list(seen.values())


def _checked_overrides(suite: str, overrides: Mapping[str, Sequence[Any]] | None) -> dict[str, tuple[Any, ...]]:
    """The axis flags given (an empty one is none), each a known axis; a usage error names what is not."""
    if suite not in SUITES:
        raise UsageError(f"unknown suite {suite!r}; choose one of {', '.join(SUITES)}")
    checked = {k: tuple(v) for k, v in (overrides or {}).items() if v}
    unknown = set(checked) - set(AXES) - {"workload"}
    if unknown:
        raise UsageError(f"unknown sweep axes {sorted(unknown)}; axes are {AXES}")
    bad_modes = [m for m in checked.get("mode", ()) if m not in MODES]
    if bad_modes:
        raise UsageError(f"--mode {bad_modes}: choose from {', '.join(MODES)}")
    return checked


WORKLOAD_AXES = ("d", "heads", "dtype", "mode", "workload")
"""The axis flags ``--workload`` takes: the batch's lengths, batch and causality are the spec's."""


def _workload_cells(overrides: Mapping[str, tuple[Any, ...]], device: str) -> Iterator[tuple[AttentionCase, str]]:
    """``--workload``'s batches (:mod:`harness.case.workload`), each one cell per head dim, heads, dtype and mode
    (default: d 64, 8 heads, float32, the forward)."""
    from harness.case.workload import parse_workloads

    other = sorted(set(overrides) - set(WORKLOAD_AXES))
    if other:
        raise UsageError(f"--workload with --{', --'.join(other)}: a serving batch's lengths, batch and causal "
                         f"masking are its spec's; only --{', --'.join(WORKLOAD_AXES[:-1])} apply")
    batches = parse_workloads(list(overrides["workload"]))
    for workload, d, heads, dtype, mode in itertools.product(
            batches, overrides.get("d", (64,)), overrides.get("heads", (8,)), overrides.get("dtype", ("float32",)),
            overrides.get("mode", ("fwd",))):
        yield workload.case(heads=int(heads), d=int(d), dtype=dtype, device=device), mode


def _explicit_cells(sweep: Mapping[str, Any], overrides: Mapping[str, tuple[Any, ...]], device: str
                    ) -> Iterator[tuple[AttentionCase, str]]:
    """A sweep of explicit cases (decode steps): only the mode and dtype axes apply, so another axis flag skips it."""
    if overrides and set(overrides) - {"mode", "dtype"}:
        return
    axes = {**sweep, **overrides}
    for fields, mode, dtype in itertools.product(sweep["cases"], axes["mode"], axes["dtype"]):
        if fields.get("kv_dtype") == dtype:  # --dtype bfloat16: the bf16-cache step is the plain bf16 one
            fields = {k: v for k, v in fields.items() if k != "kv_dtype"}
        yield AttentionCase(**fields, dtype=dtype, device=device), mode


def _grid_cells(sweep: Mapping[str, Any], overrides: Mapping[str, tuple[Any, ...]], device: str
                ) -> Iterator[tuple[AttentionCase, str]]:
    """The cross product of a sweep's axes (the flags' values replacing its own) and its structures."""
    axes = {**FULL_DEFAULTS, **sweep, **overrides}
    structures = sweep.get("structure", {})  # structure fields (window, causal_align, varlen), or a list of them
    for structure, (t, d, h, b, dtype, causal, mode) in itertools.product(
            structures if isinstance(structures, list) else [structures],
            itertools.product(*(axes[a] for a in AXES))):
        fields = {k: (f(int(t)) if callable(f) else f) for k, f in structure.items()}  # varlen: lengths from T
        yield AttentionCase(batch=int(b), heads=int(h), tq=int(t), d=int(d), dtype=dtype, causal=bool(causal),
                            device=device, **fields), mode


def plan(suite: str, implementations: Iterable[str], overrides: Mapping[str, Sequence[Any]] | None = None,
         device: str = "cpu") -> list[PlannedCell]:
    """Every implementation x every (case, mode) of the suite, smallest work first per implementation."""
    implementations = list(implementations)
    triples = _sweep_cells(suite, overrides, device)
    memory = {(name, case.id, mode) for case, mode, only in _sweep_cells(suite, overrides, device, memory_only=True)
              for name in implementations if only is None or name in only}
    cells = [PlannedCell(name, case, mode, (name, case.id, mode) in memory) for name in implementations
             for case, mode, only in triples if only is None or name in only]
    order = {name: i for i, name in enumerate(implementations)}
    return sorted(cells, key=lambda c: (order[c.implementation], c.mode, attention_flops(c.case, c.mode)))


def free_ram_bytes() -> int | None:
    """MemAvailable from /proc/meminfo (None where there is no such file)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def free_memory_bytes(device: str) -> int | None:
    """Memory free where the cells' tensors live: MemAvailable on the CPU, the GPU's free memory on CUDA
    (``torch.cuda.mem_get_info``: a cell's tensors are on the device, so the host's RAM says nothing of them)."""
    if device != "cuda":
        return free_ram_bytes()
    import torch

    if not torch.cuda.is_available():
        return free_ram_bytes()  # its cells are skipped (no CUDA device) before any budget applies
    return int(torch.cuda.mem_get_info()[0])


def io_bytes(case: AttentionCase, mode: str) -> int:
    """Bytes of q, k, v and the output (and their gradients when there is a backward pass)."""
    item = itemsize(case.dtype)
    dv = getattr(case, "value_dim", case.d)  # a module's case has one head dim
    elems = (case.batch * (case.heads * case.tq * case.d + case.kv_heads * case.tk * (case.d + dv))
             + case.batch * case.heads * case.tq * dv)  # q, k, v; the output has V's head dim
    return elems * item * (1 if mode == "fwd" else 2)


def score_elements(case: AttentionCase) -> int:
    return case.batch * case.heads * case.tq * case.tk


HELD_PER_IO_BYTE = 12
"""A timing worker's inputs and their copies, per byte of the call's inputs and output (:meth:`Budget.held_bytes`):
3 input sets x (inputs, their pristine values, the copy a write is checked against), and float64 copies for the
check. A decode step of 8 sequences of 4,096 keys (256 MiB of K and V) held 3.5 GiB in its worker."""


@dataclass
class Budget:
    """Per-cell limits: peak bytes (inputs, outputs and extra) and seconds for the whole cell."""

    memory_bytes: float
    cell_seconds: float | None
    """None: never skip a cell for time (the user named the cells)."""
    min_samples: int = 5
    warmup_s: float = 0.1
    a_priori_efficiency: float = 0.05
    timeout_s: float | None = None
    """A worker task's time limit (``--timeout``): a cell whose warm-up call and first timed call are predicted,
    from sizes of its own measured in this run, to take longer is skipped, never left to be killed."""
    history: dict[tuple[Any, ...], list[tuple[float, float, float]]] = field(default_factory=dict)
    """(implementation, mode, dtype, causal, structures, decode) -> [(g, median seconds, peak extra bytes)] measured
    so far. Decode steps (Tq < Tk) are bandwidth-bound, far below a prefill's FLOP rate: each predicts only its own kind."""
    rates: dict[str, list[float]] = field(default_factory=dict)
    """implementation (``name/decode`` for decode steps) -> FLOP/s achieved by each cell measured so far (any mode,
    dtype, causality)."""

    def record(self, implementation: str, case: AttentionCase, mode: str, median_s: float,
               extra_bytes: float | None) -> None:
        """A cell measured: ``implementation`` timed ``case`` in ``mode`` (a planned cell's, or a resumed file's
        typed cell's) at ``median_s``, with ``extra_bytes`` at its peak."""
        if median_s > 0:
            self.rates.setdefault(_rate_key(implementation, case), []).append(attention_flops(case, mode) / median_s)
        key = _history_key(implementation, mode, case)
        self.history.setdefault(key, []).append(
            (float(work_g(case) * (3.5 if mode != "fwd" else 1.0)), median_s,
             float(extra_bytes) if extra_bytes is not None else math.nan))

    def predict(self, cell: PlannedCell, peak_gflops: float | None) -> tuple[float, float, str]:
        """(seconds per call, peak bytes, how it was predicted)."""
        case, mode = cell.case, cell.mode
        g = float(work_g(case) * (3.5 if mode != "fwd" else 1.0))
        history = self.history.get(_history_key(cell.implementation, mode, case), [])
        dense_extra = 3.0 * score_elements(case) * max(4, itemsize(case.dtype)) * (1 if mode == "fwd" else 3)
        if not history:
            rate, how = self._calibrated_rate(_rate_key(cell.implementation, cell.case), peak_gflops)
            return attention_flops(case, mode) / rate, io_bytes(case, mode) + dense_extra, how
        g0, t0, _ = max(history)
        t_slope = _slope([(h[0], h[1]) for h in history], low=1.0, high=1.5)
        seconds = t0 * (g / g0) ** t_slope
        s_ratio = g / g0
        mem_points = [(h[0], h[2]) for h in history if h[2] == h[2] and h[2] > 0]
        if mem_points:
            gm, mm = max(mem_points)
            extra = mm * (g / gm) ** _slope(mem_points, low=0.0, high=1.2)
        else:
            extra = dense_extra
        return seconds, io_bytes(case, mode) + extra, f"extrapolated from {len(history)} measured size(s) (x{s_ratio:.3g} work)"

    def _calibrated_rate(self, implementation: str, peak_gflops: float | None) -> tuple[float, str]:
        """FLOP/s for a cell with no history of its own: what this run measured, pessimistic where it can be."""
        own = self.rates.get(implementation)
        if own:
            return min(own), f"at the slowest FLOP rate {implementation} reached in this run"
        others = sorted(rate for rates in self.rates.values() for rate in rates)
        if others:
            return others[len(others) // 2], "at the median FLOP rate measured in this run"
        return (peak_gflops or 10.0) * 1e9 * self.a_priori_efficiency, "a-priori model"

    def cell_seconds_predicted(self, cell: PlannedCell, peak_gflops: float | None) -> float:
        """Seconds the whole cell should take: warm-up plus the minimum samples and two more calls."""
        seconds = self.predict(cell, peak_gflops)[0]
        return max(seconds, self.warmup_s) + (self.min_samples + 2) * seconds

    def held_bytes(self, cell: PlannedCell) -> float:
        """What a contender's timing worker holds while its case's rounds run, every contender's at once: its
        input sets (each the inputs, the values they are redrawn from and the copy a write is checked against),
        the float64 copies the check reads, and the call's own predicted peak."""
        return HELD_PER_IO_BYTE * io_bytes(cell.case, cell.mode) + self.predict(cell, None)[1]

    def held_together(self, cells: Sequence[PlannedCell]) -> list[list[int]]:
        """``cells`` (one case's contenders) split, in order, into groups whose workers' held bytes together fit
        the memory budget: the rounds of one group hold every member's inputs at once, so a case of many
        contenders with large inputs is timed in several groups instead of running the machine out of memory."""
        groups: list[list[int]] = []
        held = 0.0
        for i, cell in enumerate(cells):
            size = self.held_bytes(cell)
            if groups and held + size <= self.memory_bytes:
                groups[-1].append(i)
                held += size
            else:
                groups.append([i])
                held = size
        return groups

    def check(self, cell: PlannedCell, peak_gflops: float | None) -> str | None:
        """None when the cell fits the budgets, else the skip reason with the numbers."""
        seconds, peak_bytes, how = self.predict(cell, peak_gflops)
        if peak_bytes > self.memory_bytes:
            return (f"predicted peak memory {peak_bytes / 2**30:.2f} GiB exceeds the memory budget "
                    f"{self.memory_bytes / 2**30:.2f} GiB ({how}; raise --memory-budget)")
        cell_s = max(seconds, self.warmup_s) + (self.min_samples + 2) * seconds
        measured = bool(self.history.get(_history_key(cell.implementation, cell.mode, cell.case)))
        if self.timeout_s is not None and measured and 2 * seconds > self.timeout_s:
            # a-priori rates are pessimistic by design (a cell's time budget may turn one away; a timeout
            # prediction may not): only the implementation's own measured sizes predict a timeout
            return (f"predicted {seconds:.3g} s per call ({how}): its warm-up and first timed call would run past "
                    f"the {self.timeout_s:g} s timeout (raise --timeout)")
        if self.cell_seconds is not None and cell_s > self.cell_seconds:
            return (f"predicted {cell_s:.0f} s for the cell ({seconds:.3g} s per call, {how}) exceeds the "
                    f"time budget {self.cell_seconds:g} s per cell (raise --cell-budget)")
        return None


def _history_key(implementation: str, mode: str, case: AttentionCase) -> tuple[Any, ...]:
    """Cells whose time one power law of the work predicts: a window or packing keeps its own history
    (a banded kernel's overheads differ from its dense causal cost at the same work), and so does a
    decode step (Tq < Tk: bandwidth-bound)."""
    return (implementation, mode, case.dtype, case.causal, case.structures, case.tq < case.tk)


def _rate_key(implementation: str, case: AttentionCase) -> str:
    return implementation + ("/decode" if case.tq < case.tk else "")


def _slope(points: list[tuple[float, float]], low: float, high: float) -> float:
    """Log-log slope of the points, clamped to [low, high]; low for a single point."""
    slowest: dict[float, float] = {}  # one point per size (two cases may do the same work): the slower
    for x, y in points:
        if x > 0 and y > 0:
            slowest[x] = max(y, slowest.get(x, 0.0))
    pts = sorted(slowest.items())
    if len(pts) < 2:
        return low if low > 0 else 1.0
    from harness.analysis.scaling import fit_exponent

    return min(max(fit_exponent([x for x, _ in pts], [y for _, y in pts]).slope, low), high)
