"""Print what `verify --suite quick` (or full) flags for each plugin of this set, in-process as a verify worker runs
the checks (three trials, one torch thread): the first failing case of each broken plugin, every problem of each
correct one. ``PYTHONPATH=<checkout> python3 tests/verifier/blind_models/measure.py [quick|full] [names...]``: the checkout
on PYTHONPATH decides which verifier is measured."""
from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # blind_sets.py, the tests' own procedure, beside this folder

from blind_sets import BlindSet, problems  # noqa: E402


def main() -> None:
    suite = sys.argv[1] if len(sys.argv) > 1 else "quick"
    blind = BlindSet(HERE, tag="_model")
    names = sys.argv[2:] or blind.names("broken") + blind.names("correct")
    torch.set_num_threads(1)
    caught = broken = accepted = correct = 0
    for name in names:
        started = time.perf_counter()
        found = []
        for case, r in problems(blind.implementation(name), suite):
            found.append((case.id, r["check"], r["reason"]))
            if name.startswith("broken"):
                break
        seconds = time.perf_counter() - started
        if name.startswith("broken"):
            broken += 1
            caught += bool(found)
            what = f"caught: {found[0][0]} {found[0][1]}: {str(found[0][2])[:160]}" if found else "MISSED"
        else:
            correct += 1
            accepted += not found
            what = "accepted" if not found else "FALSE ALARM: " + "; ".join(f"{c} {k}: {str(r)[:160]}" for c, k, r in found[:3])
        print(f"{name}: {what} ({seconds:.0f} s)", flush=True)
    print(f"{suite}: caught {caught} of {broken} broken, accepted {accepted} of {correct} correct", flush=True)


if __name__ == "__main__":
    main()
