"""Red team: cheats that learn which timed calls the harness checks, and do the work only on those.

Each reads the harness from inside its own process: a frame's local variables, the timing loop's
object found through the garbage collector, an audit hook on the harness's own system calls, or the
warm-up's arithmetic. On a call it believes unchecked it computes every 8th query row only.
"""

from __future__ import annotations

import sys

import redteam_kit as kit

from harness import register

STEP = 8


@register("rt_frame_peek", backend="torch", description="reads the loop's `check` local through sys._getframe")
def rt_frame_peek(q, k, v, *, causal=False, mask=None, scale=None):
    found, check = kit.frame_local("check", "round")
    if found and check or not kit.in_bench():
        return kit.attend(q, k, v, scale)
    return kit.rows_every(q, k, v, scale, STEP)  # unchecked, or no loop to read: cheat


_AUDIT = {"installed": False, "events": 0, "last_checked": False}


def _hook(event, args):
    if event == "os.listdir" and args and str(args[0]).endswith("/proc/self/task"):
        _AUDIT["events"] += 1


@register("rt_proc_task_audit", backend="torch",
          description="an audit hook sees the harness list /proc/self/task before a checked call")
def rt_proc_task_audit(q, k, v, *, causal=False, mask=None, scale=None):
    if not kit.in_bench():
        return kit.attend(q, k, v, scale)
    if not _AUDIT["installed"]:
        sys.addaudithook(_hook)  # cannot be removed: it sees every os.listdir from now on
        _AUDIT["installed"] = True
        return kit.attend(q, k, v, scale)
    # a checked call's capture lists the threads once after it returns: discount that listing
    events = _AUDIT["events"] - (1 if _AUDIT["last_checked"] else 0)
    _AUDIT["events"] = 0
    checked = events >= 1
    _AUDIT["last_checked"] = checked
    if checked:
        return kit.attend(q, k, v, scale)
    return kit.rows_every(q, k, v, scale, STEP)


_STALL = {"calls": 0, "last": 0.0, "gap": False}
STALL_S = 0.3
"""Longer than the warm-up (0.1 s): one warm-up call only, and the loop expects min_samples calls."""
_SETTINGS: dict[str, int] = {}
ROUND_GAP_S = 0.04
"""A pause between two calls longer than this is a round boundary: longer than the harness's own pause after a
checked call (a 15 ms CPU reading), shorter than another contender's round (its re-warm-up alone is 33 ms)."""


@register("rt_warmup_stall", backend="torch",
          description="stalls the warm-up so the random checked call falls among the first calls")
def rt_warmup_stall(q, k, v, *, causal=False, mask=None, scale=None):
    if not kit.in_bench():
        return kit.attend(q, k, v, scale)
    started = kit.now()
    calls, last = _STALL["calls"], _STALL["last"]
    _STALL["calls"] += 1
    if calls > 1 and started - last > ROUND_GAP_S:  # other contenders ran: a later round, maybe the final one
        _STALL["gap"] = True
    try:
        if calls == 0:  # the one warm-up call: slow, so per_call_s is large and expected = min_samples
            # the random pick lies below the bench's --min-samples (read from the bench's command line)
            _SETTINGS["min"] = int(kit.bench_option("--min-samples", "5"))
            while kit.now() - started < STALL_S:
                pass
            return kit.attend(q, k, v, scale)
        timed = calls - 1
        if not _STALL["gap"] and timed >= _SETTINGS["min"]:  # past any pick, and not in the round the last call is in
            return kit.rows_every(q, k, v, scale, STEP)
        return kit.attend(q, k, v, scale)
    finally:
        _STALL["last"] = kit.now()


@register("rt_loop_state", backend="torch",
          description="finds the loop object through gc, reads its pick and round count, cheats where no check can fall")
def rt_loop_state(q, k, v, *, causal=False, mask=None, scale=None):
    if not kit.in_bench():
        return kit.attend(q, k, v, scale)
    loop = kit.find_loop()
    if loop is None:  # no loop object to read: assume nothing is checked
        return kit.rows_every(q, k, v, scale, STEP)
    pick = getattr(loop, "pick", -1)  # -1: the loop draws no pick while it runs; cheat wherever it can
    if not loop.round_sizes and not loop.samples and pick == 0:  # the first warm-up call
        return kit.attend(q, k, v, scale)
    i = len(loop.samples)  # the index this call's sample will take (warm-up calls come before the loop's)
    final = len(loop.round_sizes) == loop.rounds - 1
    if pick and i != 0 and i != pick and not final:  # the last checked call is in the final round
        return kit.rows_every(q, k, v, scale, STEP)
    return kit.attend(q, k, v, scale)
