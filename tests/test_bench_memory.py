"""Peak memory, measured for real in a worker as `bench` does: the O(T^2) and the O(block) kernels."""

from __future__ import annotations

from typing import Any

import pytest

from harness.bench.tasks import memory_task, timing_task, traced_in_timing_worker, traced_memory_task
from harness.bench.timing import TimingConfig
from harness.case.attention import AttentionCase
from harness.contract.discovery import load_registry
from harness.runtime.isolation import OK, Task, WorkerPool, run_isolated


def _measure(cells: list[tuple[str, AttentionCase]]) -> list[dict[str, Any]]:
    results: list[Any] = []
    sources = load_registry().sources
    tasks = [Task(i, memory_task, (name, sources[name], case.to_dict(), "fwd", 2)) for i, (name, case) in enumerate(cells)]
    run_isolated(tasks, lambda task, outcome: results.append(outcome), timeout=120)
    for outcome in results:
        assert outcome.status == OK, outcome.error
    return [o.value for o in results]


def test_naive_peaks_at_one_to_three_score_matrices_and_tiled_at_a_few_tiles() -> None:
    naive = AttentionCase(batch=1, heads=4, tq=1024, d=64)
    tiled_small, tiled_big = AttentionCase(heads=4, tq=1024, d=64), AttentionCase(heads=4, tq=2048, d=64)
    naive_mem, small_mem, big_mem = _measure([("numpy_naive", naive), ("tiled", tiled_small), ("tiled", tiled_big)])

    score_matrix = naive.batch * naive.heads * naive.tq * naive.tk * 4  # one float32 T x T buffer: 16 MiB
    assert naive_mem["method"] == "tracemalloc"
    assert 1.0 * score_matrix <= naive_mem["peak_extra_bytes"] <= 3.0 * score_matrix, naive_mem

    assert big_mem["method"] == "vmhwm"
    from implementations._flash_cpu import pick_blocks

    block_q, block_k = pick_blocks(2048, 2048, 64, 4)
    tile = 4 * block_q * block_k * 4  # B*H score tiles of float32
    assert big_mem["peak_extra_bytes"] <= 4 * tile, (big_mem, tile)
    big_scores = 4 * 2048 * 2048 * 4
    assert big_mem["peak_extra_bytes"] < big_scores / 8
    # O(block), not O(T^2): doubling T (4x the score elements) must not grow it like the naive kernel
    assert big_mem["peak_extra_bytes"] <= 2 * max(small_mem["peak_extra_bytes"], tile), (small_mem, big_mem)


def test_a_numpy_kernel_reads_the_same_peak_in_its_timing_worker_after_timed_calls_as_in_a_memory_worker() -> None:
    # tracemalloc counts NumPy's own allocations whatever the allocator did before: measured where the kernel was
    # just timed (no memory worker started for it), the bytes are the fresh memory worker's, to a page (the set-up's
    # own Python objects differ by a few hundred bytes between a first cell and a later one)
    case = AttentionCase(batch=1, heads=2, tq=256, d=32)
    source = load_registry().sources["numpy_naive"]
    args = ("numpy_naive", source, case.to_dict(), "fwd")
    with WorkerPool(timeout=120) as timing, WorkerPool(timeout=120) as memory:
        timed = timing.run(Task(0, timing_task, args + (TimingConfig(budget_s=0.02, min_samples=3, warmup_s=0.0), 1)))
        here = timing.run(Task(1, traced_memory_task, args + (1,)))
        alone = memory.run(Task(2, memory_task, args + (1,)))
    assert (timed.status, here.status, alone.status) == (OK, OK, OK), (timed.error, here.error, alone.error)
    assert here.value.method == alone.value.method == "tracemalloc"
    assert here.value.peak_extra_bytes == pytest.approx(alone.value.peak_extra_bytes, abs=4096)
    assert alone.value.peak_extra_bytes > case.heads * case.tq * case.tk * 4
    assert here.value.output_bytes == alone.value.output_bytes


def test_only_numpy_kernels_on_the_cpu_are_measured_in_their_timing_worker() -> None:
    cpu, cuda = AttentionCase(heads=2, tq=64, d=32), AttentionCase(heads=2, tq=64, d=32, device="cuda")
    assert traced_in_timing_worker("numpy", cpu)
    assert not traced_in_timing_worker("torch", cpu)  # its bytes are the RSS's: the memory worker's allocator set-up
    assert not traced_in_timing_worker("numpy", cuda)


def _kept_workspace(q: Any, k: Any, v: Any, *, causal: bool = False, mask: Any = None, scale: Any = None) -> Any:
    """A T x T float32 workspace allocated by the first call and kept for the next ones."""
    import torch

    global _WORKSPACE
    shape = (*q.shape[:-1], k.shape[-2])
    if _WORKSPACE is None or tuple(_WORKSPACE.shape) != shape:
        _WORKSPACE = torch.empty(shape, dtype=torch.float32)
    torch.matmul(q, k.transpose(-1, -2), out=_WORKSPACE)
    return torch.softmax(_WORKSPACE * q.shape[-1] ** -0.5, dim=-1) @ v


_WORKSPACE: Any = None


def _workspace_cell(case: AttentionCase) -> Any:
    from harness.bench.memory import measure_torch_cpu
    from harness.bench.tasks import _set_up
    from harness.contract.registry import make_implementation

    impl = make_implementation("kept_workspace", _kept_workspace, backend="torch")
    return measure_torch_cpu(_set_up(impl, case, "fwd"))


def test_memory_a_call_keeps_for_the_next_is_charged_to_the_cell() -> None:
    """The measure spans set-up and calls: a workspace the first call allocates and the second reuses is charged
    (a per-call measure after a warm-up call read it as nothing)."""
    case = AttentionCase(batch=1, heads=2, tq=512, d=32)
    scores = case.heads * case.tq * case.tk * 4  # the kept T x T workspace: 2 MiB
    with WorkerPool(timeout=120) as pool:  # the measure sets the allocator up: a process of its own
        outcome = pool.run(Task(0, _workspace_cell, (case,)))
    assert outcome.status == OK, outcome.error
    assert outcome.value.peak_extra_bytes >= scores, outcome.value
