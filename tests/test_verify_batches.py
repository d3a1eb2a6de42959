"""verify on a cluster sends cases in batches: every case once, in order, one implementation per batch."""

from __future__ import annotations

from harness.verify.distributed import MAX_CASES_PER_TASK, TASKS_PER_CPU, batch_size, batches


def test_batches_hold_every_case_once_in_order() -> None:
    cases = list(range(103))
    for size in (1, 7, 32, 200):
        parts = list(batches(cases, size))
        assert [c for part in parts for c in part] == cases
        assert all(0 < len(part) <= size for part in parts)


def test_batch_size_keeps_enough_tasks_per_cpu_and_stays_bounded() -> None:
    assert batch_size(1700, 2) == MAX_CASES_PER_TASK  # the quick suite on two CPUs
    assert batch_size(200, 2) == 200 // (TASKS_PER_CPU * 2)  # a small run: enough tasks to share out
    assert batch_size(3, 64) == 1 and batch_size(0, 1) == 1
