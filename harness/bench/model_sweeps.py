"""``bench --model NAME``: a catalogue model's calls (:mod:`harness.case.models`) as the cells to time.

Prefill: a prompt of T = 512 .. 4,096 tokens (within the model's context), causal, one cell per kind of
layer (sliding, full), so the T exponent is fitted on the model's own heads and head dims. Decode: one new
token per sequence against caches of 4,096 and 16,384 keys, batch 1 and 8 (ragged lengths beside each
other). The memory budget skips what does not fit this machine, as for any suite (:class:`Budget`). Axis
flags: ``--T`` replaces the prompt and cache lengths, ``--batch`` the decode batches, ``--dtype`` and
``--mode`` apply (decode steps are forward only); ``--d``, ``--heads`` and ``--causal`` are the model's.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from harness.bench.sweeps import PlannedCell
from harness.case.attention import AttentionCase
from harness.case.models import ModelAttention, model_cases, model_named
from harness.errors import UsageError
from harness.reference.flops import MODES, attention_flops

PREFILL_T = (512, 1024, 2048, 4096)
DECODE_T = (4096, 16384)
DECODE_BATCH = (1, 8)
MODEL_AXES = ("T", "batch", "dtype", "mode")
"""The axis flags ``--model`` takes; the others are the model's own."""


def model_sweep(model: ModelAttention, overrides: Mapping[str, Sequence[Any]] | None = None,
                device: str = "cpu") -> list[tuple[AttentionCase, str]]:
    """(case, mode) pairs of ``model``'s calls, deduplicated, in order."""
    overrides = _checked_overrides(model, overrides)
    prefill_t, decode_t = _lengths(model, overrides.get("T", ()))
    batches = [int(b) for b in overrides.get("batch", DECODE_BATCH)]
    pairs: dict[tuple[str, str], tuple[AttentionCase, str]] = {}
    for dtype in overrides.get("dtype", ("float32",)):
        for mode in overrides.get("mode", ("fwd",)):
            found: list[AttentionCase] = []
            if "prefill" in model.forms:
                for t in prefill_t:
                    found += model_cases(model, "prefill", length=t, dtype=dtype, device=device).cases
            if "decode" in model.forms and mode == "fwd":  # a decode step is forward only
                for batch, t in itertools.product(batches, decode_t):
                    found += model_cases(model, "decode", length=t, batch=batch, dtype=dtype, device=device).cases
            for case in found:
                pairs.setdefault((case.id, mode), (case, mode))
    return list(pairs.values())


def _checked_overrides(model: ModelAttention, overrides: Mapping[str, Sequence[Any]] | None
                       ) -> dict[str, tuple[Any, ...]]:
    """The axis flags given (an empty one is none): only :data:`MODEL_AXES`, known modes; a usage error says which."""
    checked = {k: tuple(v) for k, v in (overrides or {}).items() if v}
    fixed = sorted(set(checked) - set(MODEL_AXES))
    if fixed:
        raise UsageError(f"--model {model.name} fixes {', '.join(fixed)} (the model's own); drop "
                         + " ".join(f"--{axis}" for axis in fixed) + f"; with --model only {', '.join(MODEL_AXES)} apply")
    bad = [m for m in checked.get("mode", ()) if m not in MODES]
    if bad:
        raise UsageError(f"--mode {bad}: choose from {', '.join(MODES)}")
    return checked


def _lengths(model: ModelAttention, asked: Sequence[Any]) -> tuple[list[int], list[int]]:
    """(prompt lengths, cache lengths) within the model's context: ``--T`` for both when given, else
    :data:`PREFILL_T` and :data:`DECODE_T` (the longest prompt when no cache length fits)."""
    def within(t: int) -> bool:
        return not model.max_positions or t <= model.max_positions

    fits = [int(t) for t in asked if within(int(t))]
    if asked and not fits:
        raise UsageError(f"--T {list(asked)}: {model.name}'s context is {model.max_positions} positions")
    prompts = [t for t in PREFILL_T if within(t)] or [model.max_positions]
    return fits or prompts, fits or [t for t in DECODE_T if within(t)] or prompts[-1:]


def model_plan(name: str, implementations: Iterable[str], overrides: Mapping[str, Sequence[Any]] | None = None,
               device: str = "cpu") -> list[PlannedCell]:
    """Every implementation x every (case, mode) of the model, smallest work first per implementation."""
    implementations = list(implementations)
    pairs = model_sweep(model_named(name), overrides, device)
    cells = [PlannedCell(impl, case, mode) for impl in implementations for case, mode in pairs]
    order = {impl: i for i, impl in enumerate(implementations)}
    return sorted(cells, key=lambda c: (order[c.implementation], c.mode, attention_flops(c.case, c.mode)))
