"""The red team: plugins written by an adversary who read ``harness/bench/`` are flagged, each with a
reason that names its evidence, and the honest-but-unusual set never is.

Two real ``bench`` runs, side by side (each implementation in a worker of its own, so one cheat's hooks and
patches reach no other cell): every plugin of ``redteam/`` but the clock patcher at T = 256, H = 2, d = 64
with small budgets, and the clock patcher alone (it patches the clock of every process that imports it, the
bench's parent included, so any cell beside it would read a slowed clock). The assertions are on statuses
and reason texts: no figure here depends on the machine's speed (the cheats pace themselves above the floor,
so load only slows them). ``redteam/README.md`` lists each trick and the evidence that exposes it.

Cheats that the harness at the time of writing missed are marked ``xfail(strict=True)`` with what it
missed: the set documents the gap, and an xfail that starts passing fails the run until its mark goes.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow  # bench subprocesses whose workers import torch

HERE = Path(__file__).parent / "redteam"
FILES = ("peekers.py", "precompute.py", "hooks.py", "tamper.py", "honest.py", "core.py", "descriptor.py", "layout.py")
CASE = ["--T", "256", "--heads", "2", "--d", "64", "--mode", "fwd", "--budget", "0.05", "--min-samples", "3",
        "--rounds", "3", "--no-memory", "--threads", "1", "--value-probe", "off", "--quiet"]
# --value-probe off: the corpus is judged by the cells' own checks; the value probe has its own tests (test_value_probe)
# --threads 1: the bench pins one thread, so a plugin that raises torch's thread count takes more than its share

FLAGGED = ("implausible", "violation", "wrong")
WRONG_CALL = (r"(sample|call)s? \[?\d+", r"max\|err\||fingerprint|does not match|mismatch|wrong")
"""A timed call named, and the mismatch of its output."""
FLOOR = (r"floor", r"roof|GFLOP/s")
MODE = (r"TorchFunctionMode|function mode|torch_function|mode",)
CLOCK = (r"clock|timer|perf_counter",)

# cheat: alternatives of evidence, each a tuple of patterns that must all be in the reason (case-insensitive)
EVIDENCE: dict[str, tuple[tuple[str, ...], ...]] = {
    "rt_frame_peek": (WRONG_CALL, (r"_getframe|frame",)),
    "rt_proc_task_audit": (WRONG_CALL, (r"audit hook",)),
    "rt_warmup_stall": (WRONG_CALL,),
    "rt_loop_state": (WRONG_CALL,),
    "rt_paced_prepare": (WRONG_CALL, FLOOR),
    "rt_rng_clone": (WRONG_CALL, (r"generator|random",)),
    "rt_lowrank_cache": (WRONG_CALL,),
    "rt_empty_mode_fill": (MODE, WRONG_CALL),
    "rt_dispatch_fill": ((r"dispatch|_to_copy|kernel|library|override",), WRONG_CALL),
    "rt_shift_mode_work": (MODE,),
    "rt_profile_hook": ((r"setprofile|profile|trace|hook",),),
    "rt_writes_q": ((r"wrote into|writes? into|input q|written",),),
    "rt_timer_swap": (CLOCK, (r"samples add up|time went",)),
    "rt_background_rows": (WRONG_CALL, (r"still working|after (the call|it) returned|thread",)),
    "rt_more_threads": ((r"thread count|num_threads|threads? (changed|raised|set)",),),
    "rt_clock_patch": (CLOCK,),
    "rt_ahead_thread": (WRONG_CALL, FLOOR),
}
REFUSED = {
    # a worker's description the parent will not act on: the cell is an error that says why, and nothing is written
    "rt_file_descriptor": r"not a memory file",
    "rt_lying_layout": r"shared q is .* the case's is",
}
MISSED_BY_OLDER = {
    # what an older harness made of each (one that drew its checked calls while the loop ran and treated them
    # unlike the others): the status and median of this file's run on a 2-core machine at load 13-18, against
    # ok_prepared_layout's 417 us and torch_sdpa's 400 us in the same conditions
    "rt_frame_peek": "ok at 94 us: unchecked calls compute 1/8 of the rows",
    "rt_proc_task_audit": "ok at 93 us: an audit hook sees the /proc/self/task listing before each checked call",
    "rt_warmup_stall": "ok at 106 us: a 0.3 s warm-up call puts the random pick below --min-samples",
    "rt_loop_state": "ok at 118 us: the loop's pick and round count, read through gc, leave no check on a cheated call",
    "rt_paced_prepare": "ok at 66 us: paced to 1.3x a floor of 664 GFLOP/s, the theoretical roof",
    "rt_rng_clone": "ok at 85 us: every future shift precomputed from the cloned generator",
    "rt_lowrank_cache": "ok at 283 us: the row-vector shift served exactly with one GEMM",
    "rt_empty_mode_fill": "ok at 66 us: only the outputs the harness reads are computed, inside its capture",
    "rt_dispatch_fill": "ok at 85 us: the aten::_to_copy override fills the output the harness converts",
    "rt_shift_mode_work": "ok at 67 us: the work done inside the harness's shift, before the timer",
    "rt_profile_hook": "ok at 69 us: the work done in a profile hook on the harness's shift",
    "rt_timer_swap": "ok at 161 us: samples read at 0.4x; the gap fits the 2 ms per call the accounting allows",
    "rt_more_threads": "ok: a raised thread count is not looked for (no gain on a busy 2-core machine)",
    "rt_clock_patch": "ok at 206 us: parent and worker clocks slowed alike, so their cross-check agrees",
}
HONEST = ("ok_prepared_layout", "ok_workspace", "ok_joined_pool", "ok_autotune", "ok_module_scratch",
          "ok_lazy_init", "ok_numpy", "ok_idle_pool", "ok_spinning_pool")
CLOCK_CHEAT = "rt_clock_patch"


def _start(attnbench: Any, out: Path, files: tuple[str, ...], only: list[str]) -> subprocess.Popen[str]:
    plugins = [arg for name in files for arg in ("--plugin", str(HERE / name))]
    return attnbench.start("bench", *plugins, "--only", ",".join(only), *CASE, "--out", str(out))


def _cells(proc: subprocess.Popen[str], out: Path) -> dict[str, dict[str, Any]]:
    _, stderr = proc.communicate(timeout=900)
    assert out.exists(), stderr[-3000:]
    cells = {c["implementation"]: c for c in json.loads(out.read_text())["cells"]}
    cells["_exit"] = {"code": proc.returncode, "stderr": stderr}
    return cells


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, attnbench: Any) -> dict[str, dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("redteam")
    others = sorted({*EVIDENCE, *NEUTRALISED} - {CLOCK_CHEAT})
    main = _start(attnbench, tmp / "set.json", FILES, [*others, *REFUSED, *HONEST, "torch_sdpa"])
    clock = _start(attnbench, tmp / "clock.json", ("clock_patch.py",), [CLOCK_CHEAT, "torch_sdpa"])
    cells = _cells(main, tmp / "set.json")
    clocked = _cells(clock, tmp / "clock.json")
    cells[CLOCK_CHEAT], cells["_exit_clock"] = clocked[CLOCK_CHEAT], clocked["_exit"]
    cells["_sdpa_clock"] = clocked["torch_sdpa"]
    return cells


NEUTRALISED = {
    # tricks aimed at what the worker once measured and checked itself: its clock, its timer, and the harness's own
    # operations on the inputs and outputs in its process. The parent now writes the inputs, keeps the clock and
    # reads the outputs while the worker's tree is stopped, so the trick reaches nothing that is measured: the
    # work is done inside the timed span, the cell is honest (ok) and no faster than the same work beside it
    "rt_empty_mode_fill", "rt_shift_mode_work", "rt_profile_hook", "rt_timer_swap", CLOCK_CHEAT,
    # written against that core: "done" sent before the output is copied; the copy still runs before the tree reads
    # stopped, so it is inside the sample and in the output
    "rt_done_before_copy",
    # most rows computed in a child forked for the call and reaped before done: the child's CPU time is not on the
    # tree's clock once it is reaped, but forking a worker costs more CPU than the rows it saves (16x torch_sdpa's
    # time at this size)
    "rt_forked_rows",
}


HONEST_WHEN_BLIND = {
    # cheats that do honest work when the harness shows them nothing to tell checked calls from others: every
    # call is treated alike (so the audit hook sees the same listings around every call, and the
    # warm-up stall leaves no pick to place), so whether they cheat at all depends on the round sizes
    "rt_proc_task_audit", "rt_warmup_stall",
}


def _cheat(name: str) -> Any:
    if name in HONEST_WHEN_BLIND:
        return pytest.param(name, marks=pytest.mark.xfail(strict=False, reason=f"an older harness: {MISSED_BY_OLDER[name]}; "
                                                          "now: honest work unless it guesses a call unchecked"))
    return name


@pytest.mark.parametrize("name", sorted(NEUTRALISED))
def test_each_neutralised_trick_gains_nothing(run: dict[str, dict[str, Any]], name: str) -> None:
    cell = run[name]
    sdpa = run["_sdpa_clock" if name == CLOCK_CHEAT else "torch_sdpa"]
    if cell["status"] != "ok":  # flagged all the same (its evidence named): nothing gained either
        assert cell["status"] in FLAGGED, (cell["status"], cell.get("reason"))
        return
    # the tricks' gains were 0.16-0.5x; the same work timed in the same rounds reads about 1x (the per-round ratio to
    # torch_sdpa, robust to a load that comes and goes)
    ratio = (cell.get("rounds") or {}).get("ratio") or cell["stats"]["median"] / sdpa["stats"]["median"]
    assert ratio >= 0.5, (cell.get("rounds"), cell["stats"], sdpa["stats"])


@pytest.mark.parametrize("name", [_cheat(n) for n in EVIDENCE if n not in NEUTRALISED])
def test_each_cheat_is_flagged_with_its_evidence(run: dict[str, dict[str, Any]], name: str) -> None:
    cell = run[name]
    reason = cell.get("reason") or ""
    assert cell["status"] in FLAGGED, (cell["status"], reason)
    named = [all(re.search(p, reason, re.IGNORECASE) for p in patterns) for patterns in EVIDENCE[name]]
    assert any(named), (f"{name}: the reason names none of {EVIDENCE[name]}", reason)


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_a_worker_description_the_parent_will_not_act_on_is_an_error(run: dict[str, dict[str, Any]], name: str) -> None:
    cell = run[name]
    assert cell["status"] == "error", (cell["status"], cell.get("reason"))
    assert re.search(REFUSED[name], cell.get("reason") or ""), cell.get("reason")


@pytest.mark.parametrize("name", HONEST)
def test_honest_implementations_are_never_flagged(run: dict[str, dict[str, Any]], name: str) -> None:
    cell = run[name]
    assert cell["status"] == "ok", (cell["status"], cell.get("reason"))
    assert cell["samples_s"] and all(c["max_abs_err"] <= c["bound"] for c in cell["integrity"]["checked"] if "bound" in c)


def test_every_plugin_was_timed_and_the_run_failed(run: dict[str, dict[str, Any]]) -> None:
    """No cheat crashed its way out of the set (an error is not a detection), and bench exits 1 for the flags."""
    for name in (*EVIDENCE, *HONEST):
        assert run[name]["status"] in ("ok", *FLAGGED), (name, run[name]["status"], run[name].get("reason"))
    assert run["_exit"]["code"] == 1, run["_exit"]["stderr"][-2000:]
