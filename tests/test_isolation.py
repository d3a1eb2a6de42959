"""Worker isolation for real: a crash, a hang and an exception each cost one task, never the run."""

from __future__ import annotations

import os
import time

from harness.isolation import CRASH, ERROR, OK, TIMEOUT, Task, run_isolated


def square(x: int) -> int:
    return x * x


def abort() -> None:
    os.abort()


def hang() -> None:
    time.sleep(3600)


def fail() -> None:
    raise ValueError("bad shape (B, H) expected")


def pid() -> int:
    return os.getpid()


def test_crash_hang_and_error_are_outcomes_and_later_tasks_still_run() -> None:
    tasks = [Task("a", square, (3,)), Task("crash", abort), Task("b", square, (4,)),
             Task("hang", hang, timeout=2), Task("error", fail), Task("c", square, (5,))]
    seen: dict[str, object] = {}
    run_isolated(tasks, lambda task, outcome: seen.__setitem__(task.key, outcome), timeout=30)
    assert seen["a"].status == OK and seen["a"].value == 9
    assert seen["crash"].status == CRASH and "SIGABRT" in seen["crash"].error
    assert seen["b"].status == OK and seen["b"].value == 16
    assert seen["hang"].status == TIMEOUT and "2 s" in seen["hang"].error
    assert seen["error"].status == ERROR and seen["error"].error == "ValueError: bad shape (B, H) expected"
    assert seen["c"].status == OK and seen["c"].value == 25


def test_tasks_share_one_worker_until_it_dies() -> None:
    pids: list[int] = []
    run_isolated([Task(i, pid) for i in range(3)], lambda t, o: pids.append(o.value))
    assert len(set(pids)) == 1 and pids[0] != os.getpid()
