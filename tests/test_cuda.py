"""The CUDA code paths, run for real where torch sees a GPU (``pytest -m cuda``; scripts/gpu_check.sh runs them).

Without a CUDA device every test here is skipped. Each asserts what physics or byte counts fix, never a speed:
a kernel that spins N clock cycles cannot finish in less than N / 3 GHz (no GPU's SM clock is faster), and the
caching allocator counts whole blocks of the sizes asked for.
"""

from __future__ import annotations

import pytest
import torch

from harness.bench import audit
from harness.bench.loop import Loop, cuda_loop
from harness.bench.memory import measure_cuda
from harness.bench.peak import CUDA_GEMM_SIZE, measure_gemm_peak
from harness.bench.timing import TimingConfig, cuda_timed
from harness.case.attention import AttentionCase
from harness.contract.discovery import load_registry

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not torch.cuda.is_available(), reason=f"needs a CUDA device ({torch.__version__})")]

CYCLES = 2_000_000
MAX_GHZ = 3.0
"""No GPU's SM clock reaches this: a spin of CYCLES takes at least CYCLES / MAX_GHZ ns."""
QUICK = TimingConfig(warmup_s=0.01, budget_s=0.05, min_samples=5, max_samples=20)


def test_events_time_the_device_work_not_the_launch() -> None:
    times = cuda_timed(lambda: torch.cuda._sleep(CYCLES), QUICK)
    assert min(times.samples) >= CYCLES / (MAX_GHZ * 1e9), times.samples
    assert times.loop_s >= sum(times.samples)  # the host waited for every sample: events are inside its loop


def test_work_on_a_side_stream_is_inside_the_bracket() -> None:
    side = torch.cuda.Stream()

    def call() -> None:
        with torch.cuda.stream(side):
            torch.cuda._sleep(CYCLES)  # queued on another stream; the call returns at once

    samples = cuda_timed(call, QUICK).samples
    assert min(samples) >= CYCLES / (MAX_GHZ * 1e9), samples


def test_the_l2_flush_and_the_hook_are_not_timed() -> None:
    cache = torch.empty(256 * 2**20 // 4, dtype=torch.int32, device="cuda")
    flush = cuda_timed(cache.zero_, QUICK).samples  # zeroing 256 MB, the flush itself
    called: list[int] = []
    empty = cuda_timed(lambda: None, QUICK, before=lambda i: (called.append(i), torch.cuda._sleep(CYCLES))).samples
    assert called == list(range(len(empty)))
    assert sorted(empty)[len(empty) // 2] < min(flush), (empty, flush)


def test_peak_memory_is_the_calls_own_bytes() -> None:
    mib = 2**20

    def call() -> torch.Tensor:
        scratch = torch.ones(64 * mib // 4, device="cuda")
        out = torch.empty(32 * mib // 4, device="cuda").copy_(scratch[: 8 * mib])
        del scratch
        return out

    memory = measure_cuda(lambda: (call, 0))
    assert memory.output_bytes == 32 * mib
    assert memory.peak_extra_bytes == 64 * mib


def test_the_gemm_peak_is_a_gpu_sized_product() -> None:
    peak = measure_gemm_peak("bfloat16", "cuda")
    assert peak.n == CUDA_GEMM_SIZE["bfloat16"]
    assert peak.gflops and peak.fastest_call_gflops and peak.fastest_call_gflops >= peak.gflops


def _loop(name: str, case: AttentionCase) -> tuple[Loop, audit.OutputChecks]:
    impl = load_registry().get(name)
    sets = [audit.build_set(impl, case, "fwd", inputs, seed, shift=True)
            for seed, inputs in enumerate(audit.draw_sets(case, 3, "torch"))]
    loop = cuda_loop(sets, QUICK, "torch")
    return loop, audit.check_kept(loop.kept, sets, case, "fwd")


CASE = AttentionCase(batch=2, heads=4, tq=256, d=64, dtype="bfloat16", device="cuda")


def test_a_cuda_cells_last_timed_output_is_checked_against_float64() -> None:
    loop, checks = _loop("torch_sdpa", CASE)
    assert [k.problem for k in loop.kept] == [None] and not loop.untyped
    assert loop.kept[0].index == len(loop.samples) - 1
    assert checks.problems == [] and len(checks.checked) == 1, checks
    assert loop.loop_s >= sum(loop.samples)


def _returns_v(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
               mask: torch.Tensor | None = None, scale: float | None = None) -> torch.Tensor:
    return v.clone()  # a fresh tensor of the right shape, dtype and device, and the wrong values


def test_a_wrong_cuda_output_is_found() -> None:
    from harness.contract.registry import make_implementation

    impl = make_implementation("cuda_returns_v", _returns_v, backend="torch", devices=("cuda",), dtypes=("bfloat16",))
    sets = [audit.build_set(impl, CASE, "fwd", inputs, seed, shift=True)
            for seed, inputs in enumerate(audit.draw_sets(CASE, 3, "torch"))]
    loop = cuda_loop(sets, QUICK, "torch")
    checks = audit.check_kept(loop.kept, sets, CASE, "fwd")
    assert checks.problems and "timed sample" in checks.problems[0], checks
