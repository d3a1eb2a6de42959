"""Red team: a slowed clock in every process that imports this plugin, the bench's parent included.

At import (the bench's parent imports every plugin to list it; each timing worker imports its source) it
replaces ``time.perf_counter`` and every module global that holds it (the harness binds its clocks into
module globals: ``guard.CLOCK``, ``audit.CLOCK``, ``isolation._CLOCK``) with one running at half speed, and
in a worker also the check that would notice (``guard.clock_problem``). The parent's wall clock and the
worker's agree with each other, so their cross-check passes, and every sample reads half its length.
This stands in for patching ``clock_gettime`` in libpython's GOT, which no Python-level check sees.
"""

from __future__ import annotations

import sys
import time

import redteam_kit as kit

from harness import register

RATE = 0.5
_REAL = time.perf_counter


def _slow(real=_REAL) -> float:
    return real() * RATE


def _patch() -> None:
    for module in list(sys.modules.values()):
        space = getattr(module, "__dict__", None)
        if not isinstance(space, dict) or module is kit or space is globals():
            continue
        for name, value in list(space.items()):
            if value is _REAL:
                space[name] = _slow
    time.perf_counter = _slow
    guard = sys.modules.get("harness.bench.guard")
    if guard is not None:
        guard._BOUND["perf_counter"] = _slow
        guard.clock_problem = lambda: None


_patch()


@register("rt_clock_patch", backend="torch",
          description="at import, every bound reference to perf_counter (parent and worker) runs at half speed")
def rt_clock_patch(q, k, v, *, causal=False, mask=None, scale=None):
    return kit.attend(q, k, v, scale)
