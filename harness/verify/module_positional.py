"""Say which positional variant a failing module case got wrong: ALiBi (and which heads), or RoPE.

A module that computes its own positional bias (``register_module(..., positional_bias=("alibi",))``) is checked on
the layer's output only, which mixes every head through ``out_proj``. When such an output fails, two more
runs on the same draw tell a user where to look:

- the same case without the variant (``bias="none"`` or ``rope="none"``): if it passes, the variant is
  where the layer goes wrong;
- for ALiBi, each head alone (``out_proj`` keeps only that head's columns, so the output is that head's
  attention mapped to d_model, reference likewise): the heads that fail are the heads whose slope (or
  distance) is wrong, named with the slope :func:`harness.case.positional.alibi_slopes` expects there. A layer
  that computes 2^(-8 i / H) for a head count that is not a power of two, or interleaves the extra slopes
  wrongly, is off on exactly those heads.

Each run is judged by the output rule itself (:func:`harness.reference.tolerance.compare`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import torch

from harness.case.positional import alibi_slopes
from harness.modules.cases import ModuleCase
from harness.modules.reference import baseline_output, reference_output, weighted_logit
from harness.modules.weights import ModuleInputs, MultiheadWeights, make_module_inputs
from harness.reference.tensors import TORCH_DTYPES, to_float64
from harness.reference.tolerance import compare

Run = Callable[[ModuleCase, ModuleInputs], Any]
"""Call the implementation on one trial's inputs (``harness.verify.modules.run_module`` bound to it)."""
BIAS_NAMES = {"alibi": "ALiBi"}
NAMED_HEADS = 8
"""Heads named in a reason at most (the count is always given)."""


def positional_diagnosis(run: Run, case: ModuleCase, seed: int, backend: str, m: float,
                         computes: tuple[str, ...] = ()) -> str | None:
    """A sentence naming the positional variant that fails ``case`` at ``seed``, or None when none is singled out.

    Best effort: an implementation that raises here leaves the failure's own reason as it was."""
    try:
        if case.bias != "none" and _passes(run, case.with_(bias="none"), seed, backend, m):
            how = "computed by the layer itself" if case.bias in computes else "handed to the layer as bias="
            name = BIAS_NAMES.get(case.bias, case.bias)
            return f"the positional bias ({name}, {how}) is wrong: " + _heads_off(run, case, seed, backend, m)
        if case.rope != "none" and _passes(run, case.with_(rope="none"), seed, backend, m):
            return f"the rotary embedding (RoPE, {case.rope}) is wrong: the same case without RoPE passes"
    except Exception:  # noqa: BLE001 - a diagnosis only; the failure and its reason stand without it
        return None
    return None


def _ok(run: Run, case: ModuleCase, inputs: ModuleInputs, m: float) -> bool:
    out = to_float64(run(case, inputs))
    return compare(out, reference_output(case, inputs), baseline_output(case, inputs), dtype=case.dtype, m=m,
                   logit_max=weighted_logit(case, inputs)).ok


def _passes(run: Run, case: ModuleCase, seed: int, backend: str, m: float) -> bool:
    return _ok(run, case, make_module_inputs(case, seed, backend), m)


def _heads_off(run: Run, case: ModuleCase, seed: int, backend: str, m: float) -> str:
    inputs = make_module_inputs(case, seed, backend)
    if not isinstance(inputs.weights64, MultiheadWeights):
        return "the same case without it passes"
    off = [h for h in range(case.heads) if not _ok(run, case, _one_head(inputs, case, h), m)]
    slopes = alibi_slopes(case.heads).tolist()
    if not off:
        return "the same case without it passes (each head alone passes: the heads interact wrongly)"
    named = ", ".join(f"{h} (slope 2^-{-math.log2(slopes[h]):g})" for h in off[:NAMED_HEADS])
    more = f" and {len(off) - NAMED_HEADS} more" if len(off) > NAMED_HEADS else ""
    which = "every head fails" if len(off) == case.heads else f"{len(off)} of {case.heads} heads fail"
    return (f"the same case without it passes, and {which} alone: {'head' if len(off) == 1 else 'heads'} {named}"
            f"{more} (counted from 0, with the slope expected there; the standard slopes for {case.heads} heads: "
            f"{_slope_rule(case.heads)})")


def _slope_rule(heads: int) -> str:
    closest = 1 << (heads.bit_length() - 1)
    if closest == heads:
        return f"2^(-8 i / {heads}), i = 1..{heads}"
    return (f"2^(-8 i / {closest}), i = 1..{closest}, for the closest power of two, then 2^(-8 i / {2 * closest}), "
            f"i = 1, 3, 5, ... for the {heads - closest} heads left")


def _one_head(inputs: ModuleInputs, case: ModuleCase, head: int) -> ModuleInputs:
    """The same trial with ``out_proj`` keeping only ``head``'s columns (and no output bias)."""
    assert isinstance(inputs.weights64, MultiheadWeights)
    w64 = inputs.weights64
    columns = torch.zeros(case.d_model, dtype=torch.float64)
    columns[head * case.head_dim:(head + 1) * case.head_dim] = 1.0
    one64 = dataclasses.replace(w64, out_proj_weight=w64.out_proj_weight * columns,
                                out_proj_bias=None if w64.out_proj_bias is None else torch.zeros_like(w64.out_proj_bias))
    to: Callable[[torch.Tensor], Any]
    if isinstance(inputs.x, torch.Tensor):
        device = inputs.x.device
        to = lambda t: t.to(TORCH_DTYPES[case.dtype]).to(device)
    else:
        to = lambda t: t.numpy().astype(case.dtype)
    return dataclasses.replace(inputs, weights=one64.map(to), weights64=one64)
