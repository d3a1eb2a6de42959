"""The copy-paste Python reproducer ``verify --fuzz`` prints for a minimal failing case: it rebuilds the seeded
inputs, makes the call and compares it with the oracle (or runs the failing check) as the search did."""

from __future__ import annotations

import json

from harness.case.attention import AttentionCase


def reproducer(name: str, plugins: tuple[str, ...], case: dict[str, object], check: str) -> str:
    """Copy-paste Python that rebuilds the seeded inputs, makes the call and compares it with the oracle."""
    fields = ", ".join(f"{k}={v!r}" for k, v in case.items() if k not in ("kind", "pairwise")
                       and v != AttentionCase.__dataclass_fields__[k].default)
    lines = [
        f"# attnbench verify --fuzz: the minimal failing case of {name} ({check})",
        "from harness.case.attention import AttentionCase",
        "from harness.verify.checks import SEED_BASE, call, exponent_max, oracle_and_base",
        "from harness.contract.discovery import load_registry",
        "from harness.reference.tensors import make_inputs, to_float64",
        "from harness.reference.tolerance import OUTPUT_M, compare",
        "",
        f"impl = load_registry({json.dumps(list(plugins))}).get({name!r})",
        f"case = AttentionCase({fields})",
    ]
    if check == "output":
        lines += [
            "inputs = make_inputs(case, SEED_BASE, impl.declared.backend)  # seeded: the same numbers on every run",
            "out = call(impl, case, inputs)  # q, k, v and causal=, mask=, scale= as the contract passes them",
            "oracle, base = oracle_and_base(case, inputs)  # float64 oracle; the same formula in the case's dtype",
            "verdict = compare(to_float64(out), oracle, base, dtype=case.dtype, m=OUTPUT_M, "
            "logit_max=exponent_max(case, inputs))",
            'print(case.id, "->", verdict.reason or "passes")',
        ]
    else:
        function, module = {"grad": ("check_grad(impl, case, 1)", "harness.verify.checks import check_grad"),
                            "lse": ("check_lse(impl, case, 1)", "harness.verify.lse import check_lse"),
                            }.get(check, ("stateful(impl, case)", "harness.verify.stateful import stateful"))
        lines += [f"from {module}", "", f"result = {function}  # the check, with its seeded inputs",
                  'print(case.id, "->", result.status, result.reason)']
    return "\n".join(lines) + "\n"
