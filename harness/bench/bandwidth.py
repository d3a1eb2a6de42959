"""The machine's memory bandwidth, measured in the run as the GEMM peak is: the roof of the roofline.

A decode step reads its KV cache once and does two FLOPs per byte or fewer: its ceiling is how fast
memory streams, not the GEMM peak. Two measures on buffers far beyond the caches (256 MiB each), with
the run's thread count, in the peak worker (no plugin code runs there):

- read: ``torch.sum`` over a 256 MiB float32 buffer (bytes read / median time): what a kernel that
  only reads its inputs, as decode does, can reach; "% of bandwidth" divides by it;
- copy: ``dst.copy_(src)`` between two such buffers, counted as 2 x 256 MiB moved (STREAM's
  convention; write-allocate traffic is not counted), for reference.

As for the GEMM peak, the runner measures again after the cells and keeps the higher reading: load
from other processes only ever lowers it.
"""

from __future__ import annotations

from harness.analysis.stats import summarize
from harness.bench.timing import TimingConfig, pin_threads, time_call
from harness.results.records import Bandwidth

__all__ = ["BANDWIDTH_TIMING", "STREAM_BYTES", "measure_bandwidth"]

STREAM_BYTES = 256 * 2**20
"""Per buffer: far beyond any L3 this kind of machine has, small enough to measure in a second."""
BANDWIDTH_TIMING = TimingConfig(budget_s=0.6, min_samples=5)
SMALLEST_STREAM_BYTES = 16 * 2**20
"""The smallest buffer a smoke run's roof budget shrinks the bandwidth reading to."""


def measure_bandwidth(device: str, config: TimingConfig = BANDWIDTH_TIMING, threads: int | None = None,
                      share: float = 1.0) -> Bandwidth:
    """Read and copy GB/s (1e9 bytes per second) over :data:`STREAM_BYTES` buffers, medians of repeated calls;
    ``share`` < 1 (a smoke run's roof budget, :func:`~harness.bench.timing.roof_share`) shrinks the buffers with
    it, to :data:`SMALLEST_STREAM_BYTES` at least (the caches may serve them: a higher reading, stated in the
    method, that only lowers a floor)."""
    import torch

    used_threads = pin_threads(threads)
    nbytes = STREAM_BYTES if share >= 1.0 else max(SMALLEST_STREAM_BYTES, int(STREAM_BYTES * share) >> 20 << 20)
    n = nbytes // 4
    src = torch.ones(n, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    read = summarize(time_call(lambda: src.sum(), device, config))
    copy = summarize(time_call(lambda: dst.copy_(src), device, config))
    return Bandwidth(
        read_gbps=nbytes / (read.median or 0.0) / 1e9,
        copy_gbps=2 * nbytes / (copy.median or 0.0) / 1e9,
        method=f"torch.sum over {nbytes >> 20} MiB float32 (read) and copy_ between two such buffers "
               f"(2 x {nbytes >> 20} MiB moved) on {device}, medians of {read.n} and {copy.n} calls",
        bytes=nbytes, threads=used_threads, read_stats=read, copy_stats=copy)
