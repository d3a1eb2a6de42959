"""Run a command as a CPU of a lower ISA tier would: ``python3 scripts/at_tier.py TIER -- COMMAND...``.

TIER is ``avx2``, ``generic`` or ``below`` (the highest tier under this CPU's own: avx2 on an AVX-512 CPU,
generic on an AVX2 one). The command gets every variable that caps a library in the process
(``implementations._cpp_build.TIER_ENV``): attnbench's kernels (``ATTNBENCH_ISA_CAP``), ATen, oneDNN, MKL and
OpenBLAS, so that nothing in it uses an instruction the tier's CPU lacks. CI runs the tier-dependent tests
this way (``python3 -m pytest -m tier``), so a CPU the developers lack is tested on the one they have.

Exit status: the command's; 2 for a bad tier; 0, saying so, for ``below`` on a CPU with no lower tier.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from implementations._cpp_build import ISAS, TIER_ENV, missing

LOWER = ("avx2", "generic")
"""The tiers a cap emulates, highest first."""


def own_tier() -> str:
    """The highest level of ``ISAS`` this CPU runs, uncapped."""
    os.environ.pop("ATTNBENCH_ISA_CAP", None)
    return [name for name, isa in ISAS.items() if missing(isa) is None][-1]


def below(own: str) -> str | None:
    """The highest emulated tier strictly under ``own``, or None when there is none."""
    order = list(ISAS)
    return next((tier for tier in LOWER if order.index(tier) < order.index(own)), None)


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--" or argv[0] not in (*LOWER, "below"):
        print(f"usage: python3 scripts/at_tier.py {{{','.join(LOWER)},below}} -- COMMAND...", file=sys.stderr)
        return 2
    own = own_tier()
    tier = below(own) if argv[0] == "below" else argv[0]
    if tier is None:  # a CPU without AVX2: its own run was the lowest tier already
        print(f"at_tier: this CPU's own tier is {own}; there is no lower tier to emulate, nothing to run", file=sys.stderr)
        return 0
    env = {**os.environ, **TIER_ENV[tier]}
    print(f"at_tier: this CPU runs {own}; running as {tier}: "
          + " ".join(f"{k}={v}" for k, v in TIER_ENV[tier].items()), file=sys.stderr, flush=True)
    os.execvpe(argv[2], argv[2:], env)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
