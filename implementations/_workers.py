"""Run independent tile jobs on all cores with one single-threaded torch per worker thread.

Why not let each torch operation use every core: a tile operation is a few hundred
microseconds, and every one of them would open and close an OpenMP parallel region. On a
busy machine (other processes on the same cores) a descheduled OpenMP thread stalls every
barrier, and a tiled kernel issuing thousands of small parallel operations slowed down by
10-50x in our measurements, where one fused kernel (SDPA) only doubled. Instead, the work
is cut into items (heads x blocks), W worker threads (W = ``torch.get_num_threads()``) pull
them from a shared list, and each runs its torch operations single-threaded; torch releases
the GIL inside operations, so the workers run in parallel and never wait on each other
except at the end. During the call torch's thread count is 1 (so MKL does not spawn its
own threads inside the workers); it is restored afterwards.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch

_POOL: ThreadPoolExecutor | None = None
_POOL_SIZE = 0
_POOL_LOCK = threading.Lock()


def _pool(workers: int) -> ThreadPoolExecutor:
    global _POOL, _POOL_SIZE
    with _POOL_LOCK:
        if _POOL is None or _POOL_SIZE != workers:
            if _POOL is not None:
                _POOL.shutdown(wait=True)
            _POOL = ThreadPoolExecutor(workers, thread_name_prefix="attnbench-tiled",
                                       initializer=torch.set_num_threads, initargs=(1,))
            _POOL_SIZE = workers
        return _POOL


def run_parallel(items: Sequence[Any], job: Callable[[Any, dict], None]) -> list[dict]:
    """Call ``job(item, state)`` for every item, in order of the list as workers free up.

    ``state`` is a dict private to one worker (tile buffers, partial sums); the states of
    all workers are returned so the caller can combine partial results. Jobs run without
    autograd recording (a kernel computes raw tensors; its autograd.Function does the rest).
    """
    workers = min(torch.get_num_threads(), len(items))
    if workers <= 1 or threading.current_thread().name.startswith("attnbench-tiled"):
        state: dict = {}
        with torch.no_grad():
            for item in items:
                job(item, state)
        return [state]
    queue = iter(items)
    lock = threading.Lock()

    @torch.no_grad()  # grad mode is per thread; these are raw kernels, never recorded
    def drain() -> dict:
        state: dict = {}
        while True:
            with lock:
                item = next(queue, None)
            if item is None:
                return state
            job(item, state)

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        futures = [_pool(workers).submit(drain) for _ in range(workers)]
        return [future.result() for future in futures]
    finally:
        torch.set_num_threads(threads)
