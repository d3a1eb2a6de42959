"""Peak extra memory of one call: bytes at the peak above its inputs and its output.

Measured in runs of their own, never while timing (tracing slows calls down):

- NumPy: ``tracemalloc``, which NumPy reports every array buffer to.
- torch on CPU: tracemalloc cannot see ATen's native allocations, so the process's own
  high-water mark is used: reset it to the current resident size by writing ``5`` to
  ``/proc/self/clear_refs``, make the call, read ``VmHWM`` from ``/proc/self/status``.
  For that to be exact, freed memory must go back to the kernel and new buffers must take
  fresh pages: :func:`prepare_process` pins glibc's mmap threshold at 64 KiB (turning off
  its dynamic growth, which would otherwise serve a later call from heap pages an earlier
  call left resident) and the heap is trimmed before each measure. Resolution: one page.
  Run it in a worker process of its own (the runner does), never in a timing process.
- CUDA: ``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats``, less what was
  allocated before the call and the output.

A warm-up call comes first, so one-time allocations (thread pools, caches) are not charged.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.results.records import Memory

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
_PREPARED = False


def prepare_process() -> str | None:
    """Make RSS track allocations (glibc mallopt); None when done, else why it could not be."""
    global _PREPARED
    libc = _libc()
    if libc is None:
        return "glibc not found: RSS may lag behind frees"
    if not _PREPARED:
        libc.mallopt(M_MMAP_THRESHOLD, 64 * 1024)
        libc.mallopt(M_TRIM_THRESHOLD, 128 * 1024)
        _PREPARED = True
    return None


def _libc() -> Any:
    name = ctypes.util.find_library("c")
    if not name:
        return None
    try:
        libc = ctypes.CDLL(name)
        libc.mallopt, libc.malloc_trim  # noqa: B018 - glibc only
    except (OSError, AttributeError):
        return None
    return libc


def release_memory() -> None:
    """Give the memory of what this process freed back to the system: collect cycles, then trim glibc's heaps (its
    dynamic mmap threshold serves large buffers from the heap once one was freed, and a freed heap page stays
    resident until trimmed)."""
    gc.collect()
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)


def output_bytes(out: Any) -> int:
    """Bytes held by the arrays/tensors in ``out`` (a tensor, an array, or a tuple of them)."""
    if isinstance(out, (tuple, list)):
        return sum(output_bytes(x) for x in out)
    if hasattr(out, "nbytes") and not hasattr(out, "element_size"):
        return int(out.nbytes)  # numpy
    if hasattr(out, "element_size"):
        return int(out.untyped_storage().nbytes())  # torch: the whole storage it keeps alive
    return 0


def measure_numpy(fn: Callable[[], Any]) -> Memory:
    """Peak extra bytes of ``fn()`` by tracemalloc (NumPy buffers are traced)."""
    fn()
    gc.collect()
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        out = fn()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    returned = output_bytes(out)
    return Memory(peak_extra_bytes=max(int(peak - before - returned), 0), output_bytes=returned, method="tracemalloc")


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def measure_torch_cpu(fn: Callable[[], Any]) -> Memory:
    """Peak extra bytes of ``fn()`` from the process high-water mark (VmHWM reset via clear_refs)."""
    problem = prepare_process()
    libc = _libc()
    out = fn()
    del out
    gc.collect()
    if libc is not None:
        libc.malloc_trim(0)
    rss_before = _status_kib("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")
    out = fn()
    hwm = _status_kib("VmHWM")
    returned = output_bytes(out)
    return Memory(peak_extra_bytes=max(int((hwm - rss_before) * 1024 - returned), 0), output_bytes=returned,
                  method="vmhwm", note=problem or None)


def measure_cuda(fn: Callable[[], Any]) -> Memory:
    """Peak extra device bytes of ``fn()`` from torch's CUDA allocator statistics."""
    import torch

    out = fn()
    del out
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    out = fn()
    torch.cuda.synchronize()
    returned = output_bytes(out)
    extra = torch.cuda.max_memory_allocated() - before - returned
    return Memory(peak_extra_bytes=max(int(extra), 0), output_bytes=returned, method="cuda_max_memory_allocated")


def measure(fn: Callable[[], Any], backend: str, device: str) -> Memory:
    """The right method for the backend and device."""
    if device == "cuda":
        return measure_cuda(fn)
    if backend == "numpy":
        return measure_numpy(fn)
    return measure_torch_cpu(fn)
