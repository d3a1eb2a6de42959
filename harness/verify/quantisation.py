"""What storing the KV cache in FP8 costs by itself: measured on every FP8 case, reported, never failed.

The output check judges a kernel against float64 attention on the *dequantized* cache (``stored * scale``), the
question the kernel was asked; how far that answer lies from attention on the cache before it was quantised is a
property of the format and the scales, not of any kernel, so it can fail no kernel. This check measures it on the
case's first trial and stores it beside the kernel's own numbers, so a reader sees both: the kernel's error
against the dequantized cache (the output check) and the quantisation's against the unquantised one (here),
with the rule's bound for scale (``times_bound``: how many of the kernel's allowed errors the quantisation alone
would take). It always passes; an error is the harness's.
"""

from __future__ import annotations

import torch

from harness.case.attention import AttentionCase
from harness.reference.oracle import reference_attention, reference_rows
from harness.reference.tensors import make_inputs
from harness.reference.tolerance import OUTPUT_M, floor_for
from harness.verify.checks import PASS, SEED_BASE, CheckResult, cell, exponent_max, oracle_and_base, sampled_rows

CHECK = "kv_quantisation"


def _rel(err: torch.Tensor, exact: torch.Tensor) -> float:
    """||err|| / ||exact|| (0 for an all-zero ``exact``)."""
    norm = float(exact.norm())
    return float(err.norm()) / norm if norm > 0 else 0.0


def check_quantisation(case: AttentionCase) -> CheckResult:
    """The FP8 cache's own error: float64 attention on the dequantized cache against float64 attention on the
    unquantised one (the same q, mask and structures), and K's and V's own relative error. Calls no implementation."""
    inputs = make_inputs(case, SEED_BASE, "torch")
    quantized = inputs.quantized
    assert quantized is not None and quantized.k.exact is not None and quantized.v.exact is not None
    k_exact, v_exact = quantized.k.exact.to(torch.float64), quantized.v.exact.to(torch.float64)
    rows = sampled_rows(case, 0)
    kwargs = inputs.oracle_kwargs(case)
    if rows is None:
        unquantised = reference_attention(inputs.q64, k_exact, v_exact, **kwargs)
    else:
        unquantised = reference_rows(inputs.q64, k_exact, v_exact, rows, **kwargs)
    oracle, base = oracle_and_base(case, inputs, rows=rows)
    err = (oracle - unquantised).abs()
    bound = OUTPUT_M * float((base - oracle).nan_to_num().abs().max()) \
        + floor_for(case.dtype, float(oracle.abs().max()), exponent_max(case, inputs, rows))
    k64, v64 = quantized.dequantized()
    elements = k_exact.numel() + v_exact.numel()
    metrics = {
        "reported_only": True,
        "output_err": float(err.max()) if err.numel() else 0.0,
        "output_rel_l2": _rel(oracle - unquantised, unquantised),
        "times_bound": (float(err.max()) / bound) if err.numel() and bound > 0 else 0.0,
        "kernel_bound": bound,
        "k_rel_l2": _rel(k64 - k_exact, k_exact),
        "v_rel_l2": _rel(v64 - v_exact, v_exact),
        "clipped_share": (quantized.k.clipped + quantized.v.clipped) / elements if elements else 0.0,
        "kv_dtype": case.kv_dtype,
        "kv_scales": case.kv_scales,
    }
    if rows is not None:
        metrics["sampled_rows"] = len(rows)
    return cell(CHECK, PASS, None, metrics)
