"""``bench --model NAME``: a catalogue model's calls (:mod:`harness.case.models`) as the cells to time.

Two sweeps, both fitted on the model's own heads and head dims (one cell per kind of layer: sliding, full),
each axis a fit has with at least three points:

- ``--suite quick`` (the default) fits a 2-core machine in minutes: prompts of T = 256, 512 and 1,024
  tokens, causal; one new token per sequence against caches of 1,024, 4,096 and 16,384 keys at batch 1
  (the cache-length fit), and a batch of 8 ragged caches of up to 1,024 keys; and the model's serving batch
  (:func:`~harness.case.models.serving_workload`: a prompt's chunk, 8 decode steps and a speculative step) on
  1,024 cached keys each.
- ``--suite full`` is the long sweep: prompts of 512 to 4,096 tokens, and caches of 1,024, 4,096 and
  16,384 keys at batch 1 and at batch 8 (a batch of 8 x 16,384 keys holds 1 GiB of fp32 cache per input
  set: minutes a contender on two cores); the serving batch at each of those cache lengths.

Lengths stay within the model's context. The memory budget and the per-cell time budget skip what does
not fit this machine (:class:`~harness.bench.sweeps.Budget`). Axis flags: ``--T`` replaces the prompt and
cache lengths, ``--batch`` the decode batches, ``--dtype`` and ``--mode`` apply (decode steps are forward
only); ``--d``, ``--heads`` and ``--causal`` are the model's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from harness.bench.sweeps import PlannedCell
from harness.case.attention import AttentionCase
from harness.case.models import ModelAttention, model_cases, model_named
from harness.errors import UsageError
from harness.reference.flops import MODES, attention_flops

PREFILL_T = {"quick": (256, 512, 1024), "full": (512, 1024, 2048, 4096)}
"""Prompt lengths of each sweep."""
DECODE_T = (1024, 4096, 16384)
"""Cache lengths of a decode step at batch 1 (and, in the full sweep, at every decode batch)."""
DECODE_BATCH = {"quick": (1, 8), "full": (1, 8)}
QUICK_BATCHED_T = (1024,)
"""The quick sweep's cache length at a batch above 1: one point (no fit), the cost of batching beside batch 1's."""
SERVING_DECODES = 8
"""Decode steps in a model's serving batch, beside its prompt chunk and its speculative step."""
SUITES = tuple(PREFILL_T)
MODEL_AXES = ("T", "batch", "dtype", "mode")
"""The axis flags ``--model`` takes; the others are the model's own."""


def model_sweep(model: ModelAttention, overrides: Mapping[str, Sequence[Any]] | None = None,
                device: str = "cpu", suite: str = "quick") -> list[tuple[AttentionCase, str]]:
    """(case, mode) pairs of ``model``'s calls in ``suite``'s sweep (quick or full), deduplicated, in order."""
    if suite not in SUITES:
        raise UsageError(f"--model with --suite {suite}: choose {' or '.join(SUITES)} (the model's short or long sweep)")
    overrides = _checked_overrides(model, overrides)
    prefill_t, decode_t = _lengths(model, overrides.get("T", ()), PREFILL_T[suite])
    steps = _decode_steps(overrides, suite, decode_t)
    pairs: dict[tuple[str, str], tuple[AttentionCase, str]] = {}
    for dtype in overrides.get("dtype", ("float32",)):
        for mode in overrides.get("mode", ("fwd",)):
            found: list[AttentionCase] = []
            if "prefill" in model.forms:
                for t in prefill_t:
                    found += model_cases(model, "prefill", length=t, dtype=dtype, device=device).cases
            if "decode" in model.forms and mode == "fwd":  # a decode step is forward only
                for batch, t in steps:
                    found += model_cases(model, "decode", length=t, batch=batch, dtype=dtype, device=device).cases
            if "serving" in model.forms and mode == "fwd":
                for t in _serving_lengths(overrides, suite, decode_t):
                    found += model_cases(model, "serving", length=t, batch=SERVING_DECODES, dtype=dtype,
                                         device=device).cases
            for case in found:
                pairs.setdefault((case.id, mode), (case, mode))
    return list(pairs.values())


def _serving_lengths(overrides: Mapping[str, Sequence[Any]], suite: str, decode_t: Sequence[int]) -> list[int]:
    """The cache lengths of the serving batch: the quick sweep's own takes :data:`QUICK_BATCHED_T` (or the longest
    cache that fits the model's context); ``--T`` or the full sweep, every cache length."""
    if suite == "full" or overrides.get("T"):
        return list(decode_t)
    return [t for t in decode_t if t in QUICK_BATCHED_T] or [max(decode_t)]


def _decode_steps(overrides: Mapping[str, Sequence[Any]], suite: str, decode_t: Sequence[int]) -> list[tuple[int, int]]:
    """(batch, cache length) of each decode step: every batch at every length, except the quick sweep's own (no
    ``--T`` or ``--batch``), whose batches above one take :data:`QUICK_BATCHED_T` only (or, where the model's
    context is shorter, its longest cache)."""
    batches = [int(b) for b in overrides.get("batch", DECODE_BATCH[suite])]
    short = suite == "quick" and not overrides.get("T") and not overrides.get("batch")
    steps = [(b, t) for b in batches for t in decode_t if not short or b == 1 or t in QUICK_BATCHED_T]
    if short and not any(b > 1 for b, _ in steps):
        steps += [(b, max(decode_t)) for b in batches if b > 1]
    return steps


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


def _lengths(model: ModelAttention, asked: Sequence[Any], prompts_wanted: Sequence[int]) -> tuple[list[int], list[int]]:
    """(prompt lengths, cache lengths) within the model's context: ``--T`` for both when given, else
    ``prompts_wanted`` and :data:`DECODE_T` (the longest prompt when no cache length fits)."""
    def within(t: int) -> bool:
        return not model.max_positions or t <= model.max_positions

    fits = [int(t) for t in asked if within(int(t))]
    if asked and not fits:
        raise UsageError(f"--T {list(asked)}: {model.name}'s context is {model.max_positions} positions")
    prompts = [t for t in prompts_wanted if within(t)] or [model.max_positions]
    return fits or prompts, fits or [t for t in DECODE_T if within(t)] or prompts[-1:]


def model_plan(name: str, implementations: Iterable[str], overrides: Mapping[str, Sequence[Any]] | None = None,
               device: str = "cpu", suite: str = "quick") -> list[PlannedCell]:
    """Every implementation x every (case, mode) of the model, smallest work first per implementation."""
    implementations = list(implementations)
    pairs = model_sweep(model_named(name), overrides, device, suite)
    cells = [PlannedCell(impl, case, mode) for impl in implementations for case, mode in pairs]
    order = {impl: i for i, impl in enumerate(implementations)}
    return sorted(cells, key=lambda c: (order[c.implementation], c.mode, attention_flops(c.case, c.mode)))
