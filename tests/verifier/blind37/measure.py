"""Print what `verify --suite quick` (or full) flags for each plugin of this set, in-process as a verify worker runs
the checks (three trials, one torch thread): the first failing case of each broken plugin, every problem of each
correct one. ``PYTHONPATH=<checkout> python3 tests/verifier/blind37/measure.py [quick|full] [names...]``: the checkout
on PYTHONPATH decides which verifier is measured."""
from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

from harness.contract.discovery import load_registry
from harness.verify.case_checks import check_kernel_case
from harness.verify.modules import check_module_case, module_cases
from harness.verify.suites import kernel_cases

HERE = Path(__file__).resolve().parent


def main() -> None:
    suite = sys.argv[1] if len(sys.argv) > 1 else "quick"
    names = sys.argv[2:] or sorted(p.stem for p in HERE.glob("*37_*.py"))
    torch.set_num_threads(1)
    caught = broken = accepted = correct = 0
    for name in names:
        started = time.perf_counter()
        impl = load_registry([str(HERE / f"{name}.py")], builtins=False, entry_points=False).get(name)
        problems = []
        module = impl.kind == "module"
        for case in module_cases(impl, suite) if module else kernel_cases(impl, suite):
            if impl.not_supported_reasons(case) or (module and case.unsupported_by(impl)):
                continue
            results = check_module_case(impl, case, 3) if module else check_kernel_case(impl, case, 3)
            problems += [(case.id, r["check"], r["reason"]) for r in results if r["status"] not in ("pass", "skipped")]
            if problems and name.startswith("broken"):
                break
        seconds = time.perf_counter() - started
        if name.startswith("broken"):
            broken += 1
            caught += bool(problems)
            what = f"caught: {problems[0][0]} {problems[0][1]}: {str(problems[0][2])[:160]}" if problems else "MISSED"
        else:
            correct += 1
            accepted += not problems
            what = "accepted" if not problems else "FALSE ALARM: " + "; ".join(f"{c} {k}: {str(r)[:160]}" for c, k, r in problems[:3])
        print(f"{name}: {what} ({seconds:.0f} s)", flush=True)
    print(f"{suite}: caught {caught} of {broken} broken, accepted {accepted} of {correct} correct", flush=True)


if __name__ == "__main__":
    main()
