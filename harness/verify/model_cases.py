"""``verify --model NAME``: a catalogue model's calls (:mod:`harness.case.models`) as the cases to check.

Each implementation gets the model's prefill (forward, and with gradients when it declares them) and
decode cases in its primary dtype, and in bfloat16 too when it declares it (what the models run in), on
each of its devices here. The heads, KV heads, head dims, scale and windows are the model's own; the
lengths are the largest that fit: a prompt of up to 1,024 tokens, a cache of up to 4,096 keys over a batch
of 4 ragged sequences, within the model's context, the memory share and :data:`MAX_ELEMENTS`. A sliding window
those lengths do not pass (Mistral's and Gemma 2's 4,096) gets cases of its own past it, on one KV head's group
(:func:`past_window_cases`): a window that drops no key would test nothing of it. Cases above
the sampling threshold are checked on sampled rows (:data:`harness.verify.checks.SAMPLE_ABOVE_SCORES`), so
their cost is the implementation's call.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from harness.case.attention import AttentionCase
from harness.case.models import ModelAttention, fitting_length, model_cases
from harness.contract.registry import Implementation
from harness.verify.suites import devices_here, primary_dtype

PREFILL_LENGTHS = (256, 512, 1024)
DECODE_LENGTHS = (512, 1024, 2048, 4096)
MAX_ELEMENTS = 1 << 27
"""Arrays and scores of one call at most (134M elements): the bound on a case's time. Llama 3.1 8B keeps a
1,024-token prompt and 4,096-key caches; DeepSeek-V3's 128 heads of 192 dims, a 512-token prompt and 512-key
caches, so every check of a case stays within the worker's time limit on a loaded machine."""
DECODE_BATCH = 4
MEMORY_SHARE = 0.25
"""The share of the free memory one case may take: verify runs two implementations at a time, and the
oracle holds float64 copies beside the implementation's own arrays."""


def free_memory_bytes() -> float:
    """Free physical memory (``sysconf``), or 4 GiB where the system does not say."""
    try:
        return float(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return float(4 << 30)


@dataclass(frozen=True)
class ModelPlan:
    """The lengths ``verify --model`` uses for one model, and what of the model its cases leave out."""

    model: ModelAttention
    prefill_length: int | None
    decode_length: int | None
    left_out: tuple[str, ...]
    serving_length: int | None = None
    """The serving batch's cache length: its packed call, held whole by an implementation that takes it as a
    dense mask, is sized on its own."""


def model_plan_of(model: ModelAttention, memory_bytes: float | None = None) -> ModelPlan:
    budget = (free_memory_bytes() if memory_bytes is None else memory_bytes) * MEMORY_SHARE
    prefill = (fitting_length(model, "prefill", PREFILL_LENGTHS, budget, max_elements=MAX_ELEMENTS)
               if "prefill" in model.forms else None)
    decode = (fitting_length(model, "decode", DECODE_LENGTHS, budget, batch=DECODE_BATCH, max_elements=MAX_ELEMENTS)
              if "decode" in model.forms else None)
    serving = (fitting_length(model, "serving", DECODE_LENGTHS, budget, batch=DECODE_BATCH, max_elements=MAX_ELEMENTS)
               if "serving" in model.forms else None)
    return ModelPlan(model, prefill, decode, model.left_out(), serving)


def model_kernel_cases(impl: Implementation, plan: ModelPlan) -> list[AttentionCase]:
    """The model's cases for a kernel implementation (an unsupported one is skipped with its reason later)."""
    model = plan.model
    primary = primary_dtype(impl)
    dtypes = [primary] + (["bfloat16"] if "bfloat16" in impl.declared.dtypes and primary != "bfloat16" else [])
    cases: dict[str, AttentionCase] = {}
    for device in devices_here(impl):
        for dtype in dtypes:
            found: list[AttentionCase] = []
            if plan.prefill_length is not None:
                for grad in (False, True):
                    found += model_cases(model, "prefill", length=plan.prefill_length, dtype=dtype, device=device,
                                         grad=grad).cases
            if plan.decode_length is not None:
                found += model_cases(model, "decode", length=plan.decode_length, batch=DECODE_BATCH, dtype=dtype,
                                     device=device).cases
            if plan.serving_length is not None:
                found += model_cases(model, "serving", length=plan.serving_length, batch=DECODE_BATCH, dtype=dtype,
                                     device=device).cases
            found += past_window_cases(model, plan, dtype=dtype, device=device)
            for case in found:
                cases.setdefault(case.id, case)
    return list(cases.values())


PAST_WINDOW_KEYS = 65
"""Keys past a sliding window that the window's own cases hold (``Tk = window + 65``): more than a block of 64
drops out of sight, and the first key in sight is not on a block boundary (16, 32, 64)."""
PAST_WINDOW_QUERIES = 64
"""Queries of the prefill-chunk case past a window: the last 64 positions of the sequence."""


def past_window_cases(model: ModelAttention, plan: ModelPlan, *, dtype: str, device: str) -> list[AttentionCase]:
    """Cases past each sliding window that the plan's lengths do not pass: the model's own decode step over
    ``window + PAST_WINDOW_KEYS`` keys (its window, scale, soft-cap and sinks) and a chunk of
    :data:`PAST_WINDOW_QUERIES` new queries there, each on one KV head and its query heads (the model's GQA group).
    Within the model's context only; none where the planned prompt or cache already reaches past the window."""
    reached = max(plan.prefill_length or 0, plan.decode_length or 0)
    cases = []
    for window in model.windows:
        if window is None or window < reached or (model.max_positions and window + PAST_WINDOW_KEYS > model.max_positions):
            continue
        for case in model_cases(model, "decode", length=window + PAST_WINDOW_KEYS, dtype=dtype, device=device).cases:
            if case.window == (window - 1, 0):
                group = case.with_(heads=model.heads // model.kv_heads, kv_heads=1)
                cases += [group, group.with_(tq=PAST_WINDOW_QUERIES)]
    return cases


def model_config(plan: ModelPlan) -> dict[str, object]:
    """What a verify result file's config says of ``--model NAME``: the model, its lengths, what is left out."""
    return {"model": plan.model.name, "model_source": plan.model.source, "model_prefill_length": plan.prefill_length,
            "model_decode_length": plan.decode_length, "model_serving_length": plan.serving_length,
            "model_left_out": list(plan.left_out)}


MODULE_TOKENS = 64
"""New tokens per module case: a module case's cost is its projections' (d_model^2 per token), so a short
prompt and a cache of the planned length check the layer at its real width without the kernels' lengths."""


def model_module_cases(impl: Implementation, plan: ModelPlan, memory_bytes: float | None = None
                       ) -> tuple[list[object], str | None]:
    """The model's attention layer as module cases (d_model = heads x head_dim, GQA, RoPE when the model uses it,
    no projection biases): a prompt of 64 tokens, and one new token continuing from a cache; or the reason none fit."""
    from harness.modules.cases import ModuleCase

    model = plan.model
    if model.d_v is not None and model.d_v != model.head_dim:
        return [], f"--model {model.name}: a module case has one head dim (the model's q/k {model.head_dim}, v {model.d_v})"
    rope = "rotate_half" if model.positional == "rope" and "rotate_half" in impl.declared.rope else "none"
    base = ModuleCase(batch=1, seq=min(MODULE_TOKENS, plan.prefill_length or MODULE_TOKENS),
                      d_model=model.heads * model.head_dim, heads=model.heads, kv_heads=model.kv_heads,
                      causal=model.causal, rope=rope, proj_bias=False, dtype=primary_dtype(impl))
    weights = base.d_model * (2 * base.d_model + 2 * base.kv_dim) * (8 + 8) * 2  # float64 and the case's, twice
    budget = (free_memory_bytes() if memory_bytes is None else memory_bytes) * MEMORY_SHARE
    if weights > budget:
        return [], (f"--model {model.name}: its attention layer (d_model {base.d_model}) needs "
                    f"{weights / 2**30:.1f} GiB of weights here, over the budget of {budget / 2**30:.1f} GiB")
    cases: list[object] = [base]
    if plan.decode_length is not None:
        cases.append(base.with_(seq=1, past=plan.decode_length - 1))
    return cases, None


def model_cases_for(impl: Implementation, plan: ModelPlan) -> tuple[list[object], str | None]:
    """(the model's cases for ``impl``, or the reason it has none)."""
    if impl.declared.kind == "kernel":
        return list(model_kernel_cases(impl, plan)), None
    if impl.declared.kind == "module" and "mha" in (impl.declared.layers or ("mha",)):
        return model_module_cases(impl, plan)
    return [], f"--model {plan.model.name}: the model's attention is an mha layer; {impl.name} implements none"
