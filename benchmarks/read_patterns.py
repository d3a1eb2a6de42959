"""How fast one core reads memory in the access orders attention kernels use, beside ``torch.sum``.

    PYTHONPATH=. python3 benchmarks/read_patterns.py [--mib 1024] [--rounds 4] [--threads 1]

A decode step reads its K and V rows once, so its speed is a question of how the core's memory traffic
flows, not of arithmetic. The same bytes read in a different order can flow at a third of the rate: the
hardware prefetchers follow a stream that moves forward through memory, and lose it when a loop takes
a few bytes of one row, then of the next, and comes back. This prints, for one buffer of ``--mib``
MiB of float32 rows of 512 bytes (d = 128), the read rate of

- ``torch.sum`` over it (the probe ``attnbench bench`` and ``benchmarks/decode_targets.py`` divide by);
- a plain loop reading the rows in order;
- the same loop taking R rows at a time, G bytes of each in turn (R x G: the order of a score tile
  that loads one chunk of G bytes from each of R keys before the next chunk);
- the in-order loop with a software prefetch of every line 4 KiB ahead.

All are called in turn ``--rounds`` times after one warm-up round and compared by median (load moves
them alike). The loops are SSE2 (every x86-64 CPU has it), compiled at first use with torch's C++
extension loader. Nothing here asserts anything: these are figures for choosing a kernel's loop order.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import torch

SOURCE = r"""
#include <torch/extension.h>
#include <emmintrin.h>
#include <thread>
#include <vector>

// Sum of a buffer of rows of 512 bytes read `rows` rows at a time, `chunk` bytes of each in turn;
// `ahead` > 0: each line is also prefetched that many bytes ahead. Split into `threads` equal parts.
double read_rows(torch::Tensor x, int64_t rows, int64_t chunk, int64_t ahead, int64_t threads) {
  const char* base = static_cast<const char*>(x.data_ptr());
  const int64_t tile = rows * 512;
  const int64_t part = x.numel() * 4 / threads / tile * tile;
  std::vector<float> sums(threads);
  auto work = [&](int64_t t) {
    const char* p = base + t * part;
    __m128 a = _mm_setzero_ps(), b = _mm_setzero_ps(), c = _mm_setzero_ps(), d = _mm_setzero_ps();
    for (int64_t at = 0; at < part; at += tile)
      for (int64_t col = 0; col < 512; col += chunk)
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t o = 0; o < chunk; o += 64) {
            const char* line = p + at + r * 512 + col + o;
            if (ahead) _mm_prefetch(line + ahead, _MM_HINT_T0);
            a = _mm_add_ps(a, _mm_loadu_ps(reinterpret_cast<const float*>(line)));
            b = _mm_add_ps(b, _mm_loadu_ps(reinterpret_cast<const float*>(line + 16)));
            c = _mm_add_ps(c, _mm_loadu_ps(reinterpret_cast<const float*>(line + 32)));
            d = _mm_add_ps(d, _mm_loadu_ps(reinterpret_cast<const float*>(line + 48)));
          }
    float out[4];
    _mm_storeu_ps(out, _mm_add_ps(_mm_add_ps(a, b), _mm_add_ps(c, d)));
    sums[t] = out[0] + out[1] + out[2] + out[3];
  };
  std::vector<std::thread> pool;
  for (int64_t t = 1; t < threads; ++t) pool.emplace_back(work, t);
  work(0);
  for (auto& th : pool) th.join();
  double total = 0;
  for (float s : sums) total += s;
  return total;
}
"""

PATTERNS = [(1, 512), (2, 64), (2, 128), (4, 64), (4, 128), (4, 256), (8, 64)]
"""(rows at a time, bytes of each in turn): (1, 512) is in order; the others interleave rows."""


def _module() -> Any:
    """The compiled loops (cached by torch's extension loader after the first build)."""
    from torch.utils.cpp_extension import load_inline

    return load_inline("attnbench_read_patterns", cpp_sources=SOURCE, functions=["read_rows"],
                       extra_cflags=["-O2"], verbose=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=1024, help="buffer size (default 1024: far past any cache)")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1, help="threads reading (the probe uses as many)")
    args = parser.parse_args(argv)
    if platform.machine().lower() not in ("x86_64", "amd64"):
        print(f"read_patterns: x86-64 only (this machine is {platform.machine()})", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    module = _module()
    x = torch.ones(args.mib * 2**20 // 4)
    calls: dict[str, Callable[[], object]] = {"torch.sum": x.sum}
    for rows, chunk in PATTERNS:
        name = "in order" if rows == 1 else f"{rows} rows x {chunk} B"
        calls[name] = lambda rows=rows, chunk=chunk: module.read_rows(x, rows, chunk, 0, args.threads)
    calls["in order, prefetch 4 KiB ahead"] = lambda: module.read_rows(x, 1, 512, 4096, args.threads)
    times: dict[str, list[float]] = {name: [] for name in calls}
    for r in range(args.rounds + 1):
        for name, call in calls.items():
            start = time.perf_counter()
            call()
            if r:
                times[name].append(time.perf_counter() - start)
    probe = statistics.median(times["torch.sum"])
    print(f"{args.mib} MiB of 512-byte rows, {args.threads} thread(s), load average "
          + " ".join(f"{v:.2f}" for v in os.getloadavg()))
    print("| order | GB/s | share of torch.sum |\n|---|---|---|")
    for name, ts in times.items():
        median = statistics.median(ts)
        print(f"| {name} | {x.numel() * 4 / median / 1e9:.1f} | {100 * probe / median:.0f}% |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
