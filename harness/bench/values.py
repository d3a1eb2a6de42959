"""The value probe: a cell's case timed again under other distributions of its input values.

A kernel whose time depends on the values it is given is either one with a data-dependent fast path (a sparse
mask's empty blocks skipped, a zero row short-circuited: common, and worth knowing) or one that recognises the
harness's inputs (an integrity problem). Timing a case on one distribution says nothing of either, so bench
times one cell per implementation and mode (``--value-probe one``, the default; ``all``: every cell; ``off``)
again under :data:`~harness.analysis.values.DISTRIBUTIONS`:

- ``normal``: the usual draw, exactly as the cell's own calls get it (:mod:`harness.bench.fresh`);
- ``equal_logits``: every key row equal to the first (fresh each call), so each row of QK^T is constant;
- ``large``: q and k scaled so the logits' spread is about :data:`LARGE_LOGIT_STD` (|logit| up to about 30:
  finite in every dtype, and exp of the differences stays a normal float32);
- ``one_hot_keys``: each key row a one-hot vector at a random column, scaled so the logits are q's own entries;
- ``zeros``: q and k all zero (v drawn as usual);
- ``sparse_mask``: where the call receives a boolean mask, a block-sparse one (:func:`block_sparse`): about
  :data:`SPARSE_KEEP` of its :data:`SPARSE_BLOCK`-square tiles allowed, the first key block always, drawn afresh
  each call; not run for a case without a mask.

Every timed call still sees fresh values: the usual per-call draw from the system's entropy, then reshaped into
the distribution, so no call can reuse another's answer. The distributions are timed in the cell's own timing
worker, in :data:`PROBE_ROUNDS` rounds, each a shuffled turn of every distribution, so a change of the
machine's load hits them alike; the per-round ratios are compared when the file is read
(:mod:`harness.analysis.values`), and only the raw samples are stored (:class:`~harness.results.ValueProbe`).

Cost: one untimed call per distribution, then at least one call per distribution per round, about
:data:`PROBE_SHARE` of the cell's timing budget in all (at most :data:`MAX_CALLS` a round); with ``one``, on the
first cell of each implementation and mode whose median reaches :data:`PROBE_TARGET_S` (cells run smallest
first), else its largest planned cell. The probe's calls are not checked against float64: the cell's own
calls were, and the probe measures time only.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np
import torch

from harness.analysis.values import DISTRIBUTIONS
from harness.bench import guard
from harness.bench.settings import VALUE_PROBES
from harness.bench.sweeps import PlannedCell
from harness.bench.timing import TimingConfig, gc_disabled, pin_threads
from harness.case.attention import AttentionCase
from harness.results import BenchCell, Status, ValueProbe

PROBE_ROUNDS = 8
"""Rounds of the probe: the fewest whose min-to-max interval of the median covers 99.2%, enough for the rule's 95%
shared by five distributions (:mod:`harness.analysis.values`)."""
PROBE_SHARE = 0.25
"""The probe's timed calls take about this share of the cell's timing budget (``--budget``)."""
MAX_CALLS = 8
"""Calls of one distribution in one round, at most (a fast call gets several, so a round is not one call's luck)."""
PROBE_TARGET_S = 0.01
"""With ``--value-probe one``: the first cell of an implementation and mode whose median reaches this is probed
(long enough that a call's time is its work, short enough that the probe stays cheap)."""
LARGE_LOGIT_STD = 8.0
"""``large``: the logits' standard deviation (a row's largest |logit| about 30 at a few thousand keys)."""
SPARSE_KEEP = 0.1
"""``sparse_mask``: the share of a mask's tiles left allowed."""
SPARSE_BLOCK = 64
"""``sparse_mask``: the side of the mask's tiles (queries x keys), allowed or masked whole."""
_DRAW_VARIANCE = 1.0 + 1.0 / 12.0
"""The variance of a fresh input element: a standard normal draw plus the per-call uniform noise of half-width 0.5."""


# ---------------------------------------------------------------- the distributions, on a call's fresh values


def _keys(arrays: Mapping[str, Any], case: AttentionCase) -> Any:
    """The array that holds the keys among the redrawn ones (self-attention: q, which is k), or None."""
    if "k" in arrays:
        return arrays["k"]
    return arrays.get("q") if case.self_attention else None


def _equal_logits(arrays: dict[str, Any], case: AttentionCase, gen: np.random.Generator) -> None:
    """Every key row the first one (fresh each call): each row of QK^T constant, the softmax uniform."""
    keys = _keys(arrays, case)
    keys[..., 1:, :] = keys[..., :1, :]


def _large(arrays: dict[str, Any], case: AttentionCase, gen: np.random.Generator) -> None:
    """q and k scaled so the logits spread as :data:`LARGE_LOGIT_STD`: large, yet finite and far from underflow."""
    scale = abs(case.effective_scale) or 1.0
    factor = LARGE_LOGIT_STD / (scale * math.sqrt(case.d) * _DRAW_VARIANCE)  # q.k's spread grows by this
    targets = [arrays[n] for n in ("q", "k") if n in arrays]
    each = math.sqrt(factor) if _keys(arrays, case) is not None else factor  # keys not redrawn: q alone carries it
    for x in targets:
        x *= each


def _one_hot_keys(arrays: dict[str, Any], case: AttentionCase, gen: np.random.Generator) -> None:
    """Each key row one-hot at a random column, 1 / scale high: a logit is q's entry there (sparse keys, usual logits)."""
    keys = _keys(arrays, case)
    columns = gen.integers(0, keys.shape[-1], size=tuple(keys.shape[:-1]) + (1,))
    height = 1.0 / (abs(case.effective_scale) or 1.0)  # a logit is then q's entry at the key's column
    keys[...] = 0
    if isinstance(keys, torch.Tensor):
        keys.scatter_(-1, torch.from_numpy(columns).to(keys.device), height)
    else:
        np.put_along_axis(keys, columns, height, axis=-1)


def _zeros(arrays: dict[str, Any], case: AttentionCase, gen: np.random.Generator) -> None:
    """q and k all zero (v as drawn): the case a shortcut for empty queries or keys takes."""
    for name in ("q", "k"):
        if name in arrays:
            arrays[name][...] = 0


_SHAPES: dict[str, Callable[[dict[str, Any], AttentionCase, np.random.Generator], None]] = {
    "equal_logits": _equal_logits, "large": _large, "one_hot_keys": _one_hot_keys, "zeros": _zeros}


def _not_run(name: str, case: AttentionCase, fresh_names: Iterable[str], mask: Any) -> str | None:
    """Why distribution ``name`` cannot be timed on this call (None: it can)."""
    keys = "k" in fresh_names or case.self_attention
    if name in ("equal_logits", "one_hot_keys") and not keys:
        return "the keys reach this implementation as a page pool, which is not redrawn per call"
    if name == "sparse_mask" and mask is None:
        return "the case passes no boolean mask"
    return None


def block_sparse(shape: tuple[int, ...], gen: np.random.Generator) -> np.ndarray:
    """A boolean mask of ``shape`` (..., Tq, Tk) made of :data:`SPARSE_BLOCK`-square tiles, each allowed with probability
    :data:`SPARSE_KEEP`, the first key block always (no row is emptied): the block sparsity a kernel's fast path skips.
    Runs of equal entries, so a dense kernel's masked softmax predicts its branches as on a band or padding mask."""
    rows, keys = shape[-2], shape[-1]
    tiles = gen.random((*shape[:-2], -(-rows // SPARSE_BLOCK), -(-keys // SPARSE_BLOCK)), dtype=np.float32) < SPARSE_KEEP
    tiles[..., 0] = True
    grown = np.repeat(np.repeat(tiles, SPARSE_BLOCK, axis=-2), SPARSE_BLOCK, axis=-1)
    return np.ascontiguousarray(grown[..., :rows, :keys])


class _Mask:
    """The call's boolean mask (when it receives one): the case's own, or a sparse one drawn per call."""

    def __init__(self, named: list[tuple[str, Any]]) -> None:
        found = dict(named).get("mask")
        dtype = getattr(found, "dtype", None)
        self.live = found if dtype in (torch.bool, np.bool_) else None
        self.own = None if self.live is None else (self.live.clone() if isinstance(self.live, torch.Tensor)
                                                   else self.live.copy())
        self.sparse = False

    def lay_out(self, sparse: bool) -> None:
        """A fresh block-sparse mask for a ``sparse`` call, the case's own back for the next call after one."""
        if self.live is None or (not sparse and not self.sparse):
            return
        values: Any = self.own
        if sparse:
            values = block_sparse(tuple(self.live.shape), np.random.Generator(np.random.SFC64(guard.ENTROPY.getrandbits(63))))
        if isinstance(self.live, torch.Tensor):
            self.live.copy_(values if isinstance(values, torch.Tensor) else torch.from_numpy(values))
        else:
            self.live[...] = values
        self.sparse = sparse


# ---------------------------------------------------------------- worker side


def value_probe_task(name: str, source: str, case: dict[str, object], mode: str, config: TimingConfig,
                     threads: int | None) -> ValueProbe:
    """Worker (the implementation's timing one): the cell's case timed under each distribution, in shuffled
    rounds; the raw samples, on the cells' clock."""
    from harness.bench import audit
    from harness.contract.discovery import load_implementation

    pin_threads(threads)
    impl = load_implementation(source, name)
    attention_case = AttentionCase.from_dict(case)
    with audit.one_thread():
        (inputs,) = audit.draw_sets(attention_case, 1, impl.declared.backend)
    drawn = audit.build_set(impl, attention_case, mode, inputs, 0, shift=True)
    if drawn.fresh is None:
        return ValueProbe(clock=config.clock, error="its calls cannot be given fresh values (a backward on a fixed "
                                                    "graph)")
    mask = _Mask(drawn.named)
    skipped = {n: why for n in DISTRIBUTIONS if (why := _not_run(n, attention_case, drawn.fresh.names, mask.live))}
    names = [n for n in DISTRIBUTIONS if n not in skipped]
    timer = guard.CPU_CLOCK if config.clock == "cpu" else guard.CLOCK

    def call(distribution: str) -> float:
        """One call on fresh values of ``distribution``: its time on the cells' clock."""
        mask.lay_out(distribution == "sparse_mask")
        shape = _SHAPES.get(distribution)
        fresh = drawn.fresh
        assert fresh is not None
        fresh.lay_out(guard.ENTROPY.getrandbits(63),
                      None if shape is None else lambda arrays, gen: shape(arrays, attention_case, gen))
        started = timer()
        out = drawn.call()
        spent = timer() - started
        del out
        return spent

    with gc_disabled():
        warm = max(call(n) for n in names)  # first calls pay lazy set-up; none is timed
        calls = max(1, min(MAX_CALLS, int(config.budget_s * PROBE_SHARE / (PROBE_ROUNDS * len(names) * max(warm, 1e-6)))))
        samples: dict[str, list[float]] = {n: [] for n in names}
        order = random.Random(guard.ENTROPY.getrandbits(32))
        for _ in range(PROBE_ROUNDS):
            for distribution in order.sample(names, len(names)):
                samples[distribution] += [call(distribution) for _ in range(calls)]
    return ValueProbe(clock=config.clock, round_sizes=(calls,) * PROBE_ROUNDS,
                      samples_s={n: tuple(s) for n, s in samples.items()}, not_run=skipped or None)


# ---------------------------------------------------------------- parent side: which cells are probed


def probeable(cell: PlannedCell) -> bool:
    """Whether the probe can time ``cell``: a kernel's forward or forward+backward on the CPU (their calls get fresh
    inputs)."""
    case = cell.case
    return getattr(case, "kind", "kernel") == "kernel" and case.device == "cpu" and cell.mode in ("fwd", "fwd+bwd")


class ProbePicker:
    """Which measured cells the probe times (``--value-probe``): ``all`` every probeable cell; ``one`` per
    implementation and mode the first whose median reaches :data:`PROBE_TARGET_S`, else its last planned one (in the
    order the runner measures ``order``); ``off`` none. A resumed run's probed cells count as probed."""

    def __init__(self, setting: str, order: Iterable[PlannedCell] = (),
                 can_probe: Callable[[PlannedCell], bool] = lambda cell: False, done: Iterable[BenchCell] = ()) -> None:
        if setting not in VALUE_PROBES:
            raise ValueError(f"value probe {setting!r}: one of {', '.join(VALUE_PROBES)}")
        self.setting = setting
        self.keys = set()
        self.last: dict[tuple[str, str], Any] = {}
        for cell in order:
            if setting != "off" and can_probe(cell):
                self.keys.add(cell.key)
                self.last[(cell.implementation, cell.mode)] = cell.key
        self.probed = {(c.implementation, c.mode) for c in done if c.value_probe is not None}

    def wants(self, cell: BenchCell) -> bool:
        """Whether to probe ``cell``, just measured (then counted as its group's probe)."""
        if cell.status != Status.OK or cell.key not in self.keys:
            return False
        if self.setting == "all":
            return True
        group = (cell.implementation, cell.mode)
        if group in self.probed or not ((cell.median or 0.0) >= PROBE_TARGET_S or self.last.get(group) == cell.key):
            return False
        self.probed.add(group)
        return True
