"""The machine's achievable peak for a dtype and device: a large square GEMM, measured once per run.

"% of peak" divides a cell's GFLOP/s by this figure. A GEMM of the same dtype on the same
device, with the same thread count, in the same worker, is the honest ceiling for attention,
whose work is two matmuls: a kernel at 90% of it is near the limit of the hardware as the
libraries can drive it, whatever the data sheet says. The median over repeats is used, as
for every cell, so that load from other processes affects both sides of the ratio alike; the
runner measures it again after the cells and keeps the higher of the two readings.
NumPy cells are compared with the same torch GEMM: the peak belongs to the machine, not to a
library (NumPy's BLAS reaching less of it is part of what the number says).
"""

from __future__ import annotations

from harness.analysis.stats import summarize
from harness.bench.timing import TimingConfig, pin_threads, time_call
from harness.results.records import Peak

__all__ = ["CUDA_GEMM_SIZE", "GEMM_SIZE", "PEAK_TIMING", "measure_gemm_peak"]

GEMM_SIZE = {"float64": 2048, "float32": 2048, "float16": 1024, "bfloat16": 1024}
"""Side of the square GEMM on a CPU: large enough to reach the plateau, small enough to take a second or two."""
CUDA_GEMM_SIZE = {"float64": 4096, "float32": 4096, "float16": 8192, "bfloat16": 8192}
"""Side on a GPU: a 1024 bf16 GEMM takes microseconds on an H100 (launch and the timer's synchronize would be
most of it, and the peak read low); 8192 takes about 1.4 ms at its ~800 TFLOP/s, fp32 and fp64 at 4096 a few ms."""


PEAK_TIMING = TimingConfig(budget_s=1.5)
SMALLEST_GEMM = 256
"""The smallest side a smoke run's roof budget shrinks the GEMM to."""


def measure_gemm_peak(dtype: str, device: str, config: TimingConfig = PEAK_TIMING,
                      threads: int | None = None, share: float = 1.0) -> Peak:
    """Time ``torch.matmul`` of two n x n matrices; GFLOP/s = 2 n^3 / median seconds. ``share`` < 1 (a smoke
    run's roof budget, :func:`~harness.bench.timing.roof_share`) scales the work n^3 down with it, n at least
    :data:`SMALLEST_GEMM`."""
    import torch

    from harness.reference.tensors import TORCH_DTYPES

    used_threads = pin_threads(threads)
    n = (CUDA_GEMM_SIZE if device == "cuda" else GEMM_SIZE).get(dtype, 1024)
    if share < 1.0:
        n = max(SMALLEST_GEMM, int(n * share ** (1 / 3)) // 128 * 128)
    gen = torch.Generator(device=device).manual_seed(0)  # drawn where they are used: 8192^2 on a CPU takes seconds
    a, b = (torch.randn(n, n, generator=gen, device=device).to(TORCH_DTYPES[dtype]) for _ in range(2))
    samples = time_call(lambda: torch.matmul(a, b), device, config)
    stats = summarize(samples)
    flops = 2.0 * n ** 3
    median, fastest = stats.median or 0.0, stats.min or 0.0  # summarize fills both
    return Peak(gflops=flops / median / 1e9,
                fastest_call_gflops=flops / fastest / 1e9,  # >= gflops: the quickest call, not the median
                method=f"torch.matmul {n}x{n} {dtype} on {device}, median of {stats.n} calls",
                n=n, threads=used_threads, samples_s=tuple(samples), stats=stats)
