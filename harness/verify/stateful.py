"""State across calls: an implementation must answer the inputs it is given now, the same way twice.

A kernel can pass every single-call check and still keep state between calls: an output
cached on the buffers' data pointers (or shapes) answers yesterday's question when new
values are written into the same memory, as a training loop or a KV cache does. And a
kernel whose reductions race gives different bits on identical inputs. One check:

1. call on inputs A; call again on the same, untouched buffers: the outputs must be bitwise
   equal (unless the implementation declared ``deterministic=False``; then both must pass
   the rule on their own);
2. write inputs B into the *same* buffers in place (q, k, v, the mask, a paged cache's pages and an
   FP8 cache's scales), call a third time: the output must pass the rule against the oracle of B;
3. results stay valid: the first call's result, held by the caller all along, must not have changed
   (a kernel that hands back an internal buffer it reuses overwrites it on the next call), and no two
   results may share storage.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from harness.case.attention import AttentionCase
from harness.contract.registry import Implementation
from harness.reference.tensors import Inputs, make_inputs, to_float64
from harness.reference.tolerance import OUTPUT_M, compare
from harness.verify.boundary import shares_storage
from harness.verify.checks import (
    PASS,
    SEED_BASE,
    CheckResult,
    as_contract_rows,
    call,
    cell,
    exponent_max,
    oracle_and_base,
    structure_problem,
)


def _write_in_place(target: Any, source: Any) -> None:
    if isinstance(target, torch.Tensor):
        target.copy_(source)
    else:
        np.copyto(target, source)


def _checked(impl: Implementation, case: AttentionCase, inputs: Inputs, what: str) -> tuple[Any, CheckResult | None]:
    out = call(impl, case, inputs)
    problem = structure_problem(impl, case, out, (case.batch, case.heads, case.tq, case.value_dim))
    if problem is None:
        out = as_contract_rows(impl, case, inputs, out)
    return out, None if problem is None else cell("property:stateful", "fail", f"{what}: {problem}")


def _rule(case: AttentionCase, inputs: Inputs, out: Any, what: str) -> CheckResult | None:
    oracle, base = oracle_and_base(case, inputs)
    verdict = compare(to_float64(out), oracle, base, dtype=case.dtype, m=OUTPUT_M, logit_max=exponent_max(case, inputs))
    return None if verdict.ok else cell("property:stateful", "fail", f"{what}: {verdict.reason}", verdict.metrics)


def stateful(impl: Implementation, case: AttentionCase) -> CheckResult:
    """Twice on the same inputs (bitwise equal), then new values written into the same buffers."""
    inputs = make_inputs(case, SEED_BASE + 101, impl.declared.backend)
    held, problem = _checked(impl, case, inputs, "first call")
    if problem:
        return problem
    first = held.clone() if isinstance(held, torch.Tensor) else np.array(held, copy=True)
    second, problem = _checked(impl, case, inputs, "second call on identical inputs")
    if problem:
        return problem
    if impl.declared.deterministic:
        a, b = to_float64(first), to_float64(second)
        differ = ~((a == b) | (torch.isnan(a) & torch.isnan(b)))
        if bool(differ.any()):
            return cell("property:stateful", "fail",
                        f"two calls on identical inputs differ bitwise in {int(differ.sum())} element(s) "
                        f"(max|diff| {float((a - b).abs().nan_to_num(0.0).max()):.3g}); declare "
                        f"deterministic=False if the implementation is nondeterministic on purpose",
                        {"differing": int(differ.sum())})
    else:
        problem = _rule(case, inputs, second, "second call on identical inputs")
        if problem:
            return problem
    fresh = make_inputs(case, SEED_BASE + 202, impl.declared.backend)
    same_buffers = (("q", "k", "v") if not case.self_attention else ("q",)) + (("mask",) if inputs.mask is not None else ())
    same_buffers += ("k_pages", "v_pages", "block_table") if inputs.k_pages is not None else ()
    same_buffers += ("k_scale", "v_scale") if inputs.k_scale is not None else ()  # an FP8 cache's scales are new too
    same_buffers += ("k_scale_pages", "v_scale_pages") if inputs.k_scale_pages is not None else ()
    for name in same_buffers:
        _write_in_place(getattr(inputs, name), getattr(fresh, name))
    for name in ("q64", "k64", "v64", "mask64"):
        setattr(inputs, name, getattr(fresh, name))
    third, problem = _checked(impl, case, inputs, "call after new values were written into the same buffers")
    if problem:
        return problem
    problem = _rule(case, inputs, third, "call after new values were written into the same buffers (in place)")
    return problem or _still_valid(inputs, held, first, second, third) or cell("property:stateful", PASS, None, {})


def _still_valid(inputs: Inputs, held: Any, first: Any, second: Any, third: Any) -> CheckResult | None:
    """The first result, held since, is what it was; no two results share storage."""
    a, b = to_float64(held), to_float64(first)
    changed = ~((a == b) | (torch.isnan(a) & torch.isnan(b)))
    if bool(changed.any()):
        views = [n for n in ("q", "k", "v") if shares_storage(held, getattr(inputs, n))]
        why = (f"it is a view of input {', '.join(views)}, which the caller overwrote: a result must be the call's "
               f"own memory") if views else "the implementation reuses an output buffer across calls"
        return cell("property:stateful", "fail",
                    f"a result handed back changed in {int(changed.sum())} element(s) when the implementation was "
                    f"called again ({why})", {"changed": int(changed.sum())})
    for name, other in (("second", second), ("third", third)):
        if shares_storage(held, other):
            return cell("property:stateful", "fail",
                        f"the first and the {name} call returned results that share storage: the caller's first "
                        f"result is overwritten by the next call")
    return None
