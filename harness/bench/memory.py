"""Peak extra memory of a cell: bytes at the peak above its inputs and its output, across its set-up and its calls.

What a cell is charged is everything its implementation holds at its peak beyond the inputs it was given and
the output it returns: the set-up (``prepare``), a first call and a second one, measured as one span from
just after the inputs exist. A workspace allocated once (in set-up or by the first call) and kept for the
next call is charged, as is a cache of earlier results; a call that frees what it allocates is charged its
own peak. Before the measure the memory worker has imported the plugin, made one small attention call of its
own (:func:`warm_process`) and set up and called the implementation once on a T = 16 case of the same kind
(:func:`harness.bench.tasks.memory_task`), so one-time allocations (torch's thread pool, an extension the
plugin loads, a JIT's first compile) are the baseline, not the cell's.

Measured in runs of their own, never while timing (tracing slows calls down):

- NumPy: ``tracemalloc``, which NumPy reports every array buffer to.
- torch on CPU: tracemalloc cannot see ATen's native allocations, so the process's own
  high-water mark is used: reset it to the current resident size by writing ``5`` to
  ``/proc/self/clear_refs``, set up and make the calls, read ``VmHWM`` from ``/proc/self/status``.
  For that to be exact, freed memory must go back to the kernel and new buffers must take
  fresh pages: :func:`prepare_process` pins glibc's mmap threshold at 64 KiB (turning off
  its dynamic growth, which would otherwise serve a later call from heap pages an earlier
  call left resident) and the heap is trimmed before each measure. Resolution: one page.
  Run it in a worker process of its own (the runner does), never in a timing process.
- CUDA: ``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats``, less what was
  allocated before the set-up and the output.

The measure reads the worker's own process: memory of a process the calls start is not counted
(docs/integrity.md says what stays open).
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


SetUp = Callable[[], tuple[Callable[[], Any], int]]
"""A cell's set-up: it returns the call and the bytes of inputs the harness made in it (a backward's upstream
gradient), which are not the implementation's."""


def _two_calls(set_up: SetUp) -> tuple[Any, int]:
    """Set up, make a first call and drop its output, make the second: (its output, harness bytes made in set-up)."""
    call, harness_bytes = set_up()
    out = call()
    del out
    return call(), harness_bytes


def measure_numpy(set_up: SetUp) -> Memory:
    """Peak extra bytes of the cell by tracemalloc (NumPy buffers are traced)."""
    gc.collect()
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        out, harness_bytes = _two_calls(set_up)
        peak = tracemalloc.get_traced_memory()[1] - harness_bytes
    finally:
        tracemalloc.stop()
    returned = output_bytes(out)
    return Memory(peak_extra_bytes=max(int(peak - before - returned), 0), output_bytes=returned, method="tracemalloc")


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def measure_torch_cpu(set_up: SetUp) -> Memory:
    """Peak extra bytes of the cell from the process high-water mark (VmHWM reset via clear_refs)."""
    problem = prepare_process()
    release_memory()
    rss_before = _status_kib("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")
    out, harness_bytes = _two_calls(set_up)
    hwm = _status_kib("VmHWM")
    returned = output_bytes(out)
    return Memory(peak_extra_bytes=max(int((hwm - rss_before) * 1024 - returned - harness_bytes), 0),
                  output_bytes=returned, method="vmhwm", note=problem or None)


def measure_cuda(set_up: SetUp) -> Memory:
    """Peak extra device bytes of the cell from torch's CUDA allocator statistics."""
    import torch

    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    out, harness_bytes = _two_calls(set_up)
    torch.cuda.synchronize()
    returned = output_bytes(out)
    extra = torch.cuda.max_memory_allocated() - before - returned - harness_bytes
    return Memory(peak_extra_bytes=max(int(extra), 0), output_bytes=returned, method="cuda_max_memory_allocated")


def measure(set_up: SetUp, backend: str, device: str) -> Memory:
    """The right method for the backend and device."""
    if device == "cuda":
        return measure_cuda(set_up)
    if backend == "numpy":
        return measure_numpy(set_up)
    return measure_torch_cpu(set_up)


def warm_process(dtype: str, device: str) -> None:
    """One small attention call of the harness's own in ``dtype`` on ``device``: torch's one-time allocations
    (the thread pool, its kernels' tables) are then made before any cell's measure starts."""
    import torch

    from harness.reference.tensors import TORCH_DTYPES

    q = torch.ones(1, 2, 64, 64, dtype=TORCH_DTYPES[dtype], device=device)
    torch.nn.functional.scaled_dot_product_attention(q, q, q)
    torch.softmax(q @ q.transpose(-1, -2), dim=-1) @ q
