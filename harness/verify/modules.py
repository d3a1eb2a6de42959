"""Verify module implementations: the suites of module cases and the check of one case.

The verify runner dispatches on ``impl.declared.kind`` and calls :func:`module_cases` and
:func:`check_module_case` for ``kind="module"``. The pass rule is the kernels' rule
(:func:`harness.reference.tolerance.compare`): ``max|out - ref| <= m * max|base - ref| + floor(dtype)``,
with ``ref`` the PyTorch module in float64 and ``base`` the same module in the case's
dtype (e.g. ``nn.MultiheadAttention`` in float32), and the kernels' ``m`` (2) and floors.
Measured over the full module suite, correct modules stay within 1.7x PyTorch's own error
(3.1x only at T = 1 in float16, where the floor decides) and use at most 0.26 of the bound;
wrong modules (swapped Q/K, a LayerNorm over the wrong axis, an inverted mask) are off by O(1).

Besides the output, cases with a mask or causal check ``property:mask``: changing X at
positions that must not be read (padding tokens, future tokens) leaves the protected
outputs unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import torch

from harness.contract.registry import Implementation
from harness.modules.cases import ModuleCase, module_layers, module_positional_biases
from harness.modules.reference import baseline_output, reference_output, weighted_logit
from harness.modules.weights import ModuleInputs, make_module_inputs
from harness.reference.tensors import dtype_name, to_float64
from harness.reference.tolerance import OUTPUT_M, compare
from harness.verify.module_positional import positional_diagnosis
from harness.verify.outcome import CheckResult
from harness.verify.suites import SUITES

MODULE_M = OUTPUT_M


def module_cases(impl: Implementation, suite: str) -> list[ModuleCase]:
    """The module cases of ``suite`` for the layers ``impl`` implements, in each of its CPU/float dtypes."""
    if suite not in SUITES:
        from harness.errors import UsageError
        raise UsageError(f"unknown suite {suite!r}; choose one of {SUITES}")
    wanted = ("float32", "float64") if suite != "full" else ("float32", "float64", "bfloat16", "float16")
    dtypes = [d for d in impl.declared.dtypes if d in wanted] or [impl.declared.dtypes[0]]
    cases: list[ModuleCase] = []
    for layer in module_layers(impl):
        for dtype in dtypes:
            cases += _shapes(layer, dtype, suite)
        if layer == "mha":  # the slopes a layer computes do not depend on the dtype: its first one
            cases += _alibi_heads(dtypes[0], suite)
        if suite != "small":
            cases += [c for dtype in impl.declared.dtypes if dtype in HALF for c in _half_at_length(layer, dtype)
                      if c.id not in {seen.id for seen in cases}]
    return cases


HALF = ("bfloat16", "float16")
LONG_POSITIONS = 520
"""Module cases in half precision run to this many positions: past 256, where bfloat16 stops holding every integer
(a RoPE table whose positions or angles are computed in bfloat16 turns position 300 by the angle of 300 +- 2), and
where a float16 angle table is off by a quarter radian."""


def _half_at_length(layer: str, dtype: str) -> list[ModuleCase]:
    """What a bf16/fp16 model runs, in quick and full: long sequences with RoPE in both conventions, causal and
    padded, and ALiBi for head counts that are not powers of two (6 and 12: slopes a layer computing them the
    power-of-two way gets wrong)."""
    if layer == "encoder":
        return [ModuleCase(layer="encoder", batch=2, seq=LONG_POSITIONS // 2, d_model=64, heads=4, dtype=dtype,
                           mask="key_padding", causal=True)]
    base = ModuleCase(layer="mha", batch=1, seq=LONG_POSITIONS, d_model=64, heads=4, dtype=dtype)
    return [base.with_(rope="rotate_half", causal=True), base.with_(rope="interleaved", batch=2, seq=300, mask="key_padding"),
            base.with_(seq=300, d_model=256, heads=2, rope="rotate_half", causal=True),  # Llama's 128-dim heads
            base.with_(seq=300, d_model=96, heads=6, bias="alibi", causal=True),
            base.with_(batch=2, seq=100, d_model=96, heads=12, bias="alibi", mask="key_padding")]


def _shapes(layer: str, dtype: str, suite: str) -> list[ModuleCase]:
    if layer == "encoder":
        base = ModuleCase(layer="encoder", batch=2, seq=33, d_model=32, heads=4, dtype=dtype)
        cases = [base.with_(norm_first=nf, mask=m, causal=c)
                 for nf in (False, True) for m, c in (("none", False), ("key_padding", True))]
        if suite == "small":
            return cases[:1] + cases[2:3]
        if suite == "full":
            wide = base.with_(seq=100, d_model=64, heads=8, mask="key_padding")
            cases += [wide, wide.with_(norm_first=True)]
            cases += [base.with_(seq=1, d_model=16, heads=1), base.with_(seq=7, d_model=48, heads=3, dim_ff=20)]
        return cases
    base = ModuleCase(layer="mha", batch=2, seq=100, d_model=64, heads=4, dtype=dtype)
    if suite == "small":
        small = base.with_(seq=12, d_model=16, heads=2)
        return [small, small.with_(causal=True, mask="key_padding"), small.with_(bias="alibi"),
                small.with_(rope="rotate_half"), *_decoder(small.with_(d_model=32, heads=4), 7)]
    cases = [base, base.with_(causal=True), base.with_(mask="key_padding"),
             base.with_(causal=True, mask="key_padding", proj_bias=False),
             base.with_(bias="alibi"), base.with_(bias="alibi", causal=True),
             base.with_(rope="rotate_half"), base.with_(rope="interleaved", causal=True),
             # RoPE at the head dims real models use (16-dim heads above): Llama's 128, Phi's 80
             base.with_(d_model=256, heads=2, rope="rotate_half", causal=True),
             base.with_(seq=65, d_model=160, heads=2, rope="interleaved", mask="key_padding"),
             *_decoder(base.with_(d_model=128, heads=8), 61)]
    if suite == "full":
        cases += [base.with_(seq=1, d_model=8, heads=1), base.with_(seq=7, d_model=48, heads=3),
                  base.with_(seq=129, d_model=96, heads=8, mask="key_padding"),
                  base.with_(batch=1, seq=257, d_model=128, heads=2, causal=True),
                  base.with_(seq=33, d_model=32, heads=8, bias="alibi", mask="key_padding"),
                  base.with_(seq=65, d_model=64, heads=2, rope="interleaved", mask="key_padding")]
    return cases


def _alibi_heads(dtype: str, suite: str) -> list[ModuleCase]:
    """ALiBi for head counts that are not powers of two (BLOOM's and MPT's layers compute the slopes from the
    closest power of two, then interleave the rest): 6 heads causal, 12 padded both ways, 20 causal (small: 6).
    A layer computing its own slopes as 2^(-8 i / H) for every H, or interleaving the extra ones wrongly, is off
    by O(1) on them; 8-dim heads and 48 positions keep them cheap."""
    alibi = ModuleCase(layer="mha", batch=2, seq=48, d_model=48, heads=6, dtype=dtype, bias="alibi", causal=True)
    if suite == "small":
        return [alibi.with_(seq=12)]
    return [alibi, alibi.with_(d_model=96, heads=12, causal=False, mask="key_padding"),
            alibi.with_(d_model=160, heads=20)]


def _decoder(base: ModuleCase, past: int) -> list[ModuleCase]:
    """A decoder's attention as Llama's is: GQA (a group of 4, and MQA), RoPE, causal, no projection biases; in
    prefill, then continuing from a KV cache of ``past`` positions (a few new tokens, and one: a decode step)."""
    gqa = base.with_(kv_heads=base.heads // 4, causal=True, rope="rotate_half", proj_bias=False)
    return [gqa, gqa.with_(kv_heads=1, mask="key_padding"), gqa.with_(seq=5, past=past),
            gqa.with_(seq=1, past=past + 2, kv_heads=1, mask="key_padding")]


def run_module(impl: Implementation, case: ModuleCase, inputs: ModuleInputs) -> Any:
    """Call the implementation once (set-up included) on one trial's inputs."""
    return impl.prepare(inputs.x, **inputs.kwargs(case, module_positional_biases(impl)))()


def check_module_case(impl: Implementation, case: ModuleCase, trials: int = 1) -> list[CheckResult]:
    """Check ``impl`` on ``case`` over ``trials`` seeds: the output, and ``property:mask`` when masked.

    Returns one result per check (its check, status, reason and metrics); the worst
    trial's metrics are kept. An exception from the implementation is status ``error``.
    """
    if isinstance(case, dict):
        case = ModuleCase.from_dict(case)
    results = [_check_output(impl, case, trials)]
    bound = results[0].metrics.get("bound")
    if (case.causal or case.mask != "none") and results[0].status == "pass" and isinstance(bound, float):
        results.append(_check_mask_property(impl, case, trials, bound))
    if not impl.declared.conventions.is_contract:  # what the verdict assumed: the mask the module was handed
        assumed = impl.declared.conventions.describe()
        results = [replace(r, metrics={**r.metrics, "conventions": assumed}) for r in results]
    return results


def _result(check: str, status: str, reason: str | None, metrics: Mapping[str, object]) -> CheckResult:
    return CheckResult(check=check, status=status, reason=reason, metrics=metrics)


def _check_output(impl: Implementation, case: ModuleCase, trials: int) -> CheckResult:
    worst: dict[str, float] | None = None
    for seed in range(max(1, trials)):
        inputs = make_module_inputs(case, seed, impl.declared.backend)
        try:
            out = run_module(impl, case, inputs)
        except Exception as exc:  # noqa: BLE001 - the implementation's failure is the result, stated in full
            return _result("output", "error", f"{type(exc).__name__}: {exc}", {"trials": seed + 1})
        got_dtype = dtype_name(out)
        if got_dtype != case.dtype:
            return _result("output", "fail", f"returned {got_dtype}, expected the input dtype {case.dtype}",
                           {"trials": seed + 1})
        verdict = compare(to_float64(out), reference_output(case, inputs), baseline_output(case, inputs),
                          dtype=case.dtype, m=MODULE_M, logit_max=weighted_logit(case, inputs))
        metrics = {**verdict.metrics, "trials": seed + 1}
        if not verdict.ok:
            where = positional_diagnosis(lambda c, i: run_module(impl, c, i), case, seed, impl.declared.backend, MODULE_M,
                                         module_positional_biases(impl))
            return _result("output", "fail", f"seed {seed}: {verdict.reason}" + (f"; {where}" if where else ""), metrics)
        if worst is None or metrics["max_abs_err"] > worst["max_abs_err"]:
            worst = metrics
    assert worst is not None
    worst["trials"] = max(1, trials)
    return _result("output", "pass", None, worst)


def _check_mask_property(impl: Implementation, case: ModuleCase, trials: int, bound: float) -> CheckResult:
    """Perturb X where it must not be read; the protected outputs must not move beyond ``bound``."""
    worst = 0.0
    for seed in range(max(1, trials)):
        inputs = make_module_inputs(case, seed, impl.declared.backend)
        b, t = case.batch, case.seq
        hidden = torch.zeros(b, t, t, dtype=torch.bool)  # hidden[b, i, j]: output i must not depend on x_j
        if case.causal:
            hidden |= torch.ones(t, t, dtype=torch.bool).triu(1)
        if inputs.mask64 is not None:  # over the cached keys and the new ones; X moves only the new
            hidden |= ~inputs.mask64[:, None, case.past:]
        row = t // 2 if case.causal else t - 1
        while row > 0 and not hidden[:, row].any():
            row -= 1
        if not hidden[:, row].any():
            continue  # this draw hides nothing (e.g. no padding and not causal)
        noise = torch.randn(b, t, case.d_model, generator=torch.Generator().manual_seed(1000 + seed),
                            dtype=torch.float64) * 3.0
        x2 = torch.where(hidden[:, row, :, None], inputs.x64 + noise, inputs.x64)
        changed = ModuleInputs(**{**inputs.__dict__, "x": _like(x2, inputs.x, case)})
        try:
            y1 = to_float64(run_module(impl, case, inputs))
            y2 = to_float64(run_module(impl, case, changed))
        except Exception as exc:  # noqa: BLE001 - recorded in full as this plugin's error; the others go on
            return _result("property:mask", "error", f"{type(exc).__name__}: {exc}", {"trials": seed + 1})
        keep = ~hidden[:, row, :] & (torch.arange(t) <= row)[None, :]  # untouched rows that read no touched x
        diff = float((y1 - y2)[keep].abs().max()) if keep.any() else 0.0
        worst = max(worst, diff)
        metrics = {"max_abs_err": worst, "bound": bound, "trials": seed + 1}
        if diff > bound:
            return _result("property:mask", "fail",
                           f"seed {seed}: output at position {row} changed by {diff:.3g} (> {bound:.3g}) when X "
                           f"changed only at positions it must not read (padding or future tokens)", metrics)
    return _result("property:mask", "pass", None, {"max_abs_err": worst, "bound": bound, "trials": max(1, trials)})


def _like(x64: torch.Tensor, template: Any, case: ModuleCase) -> Any:
    """``x64`` rounded to the case's dtype, as the implementation's backend takes it."""
    from harness.reference.tensors import TORCH_DTYPES

    x = x64.to(TORCH_DTYPES[case.dtype])
    if isinstance(template, torch.Tensor):
        return x.to(template.device)
    return x.numpy()
