"""The comparison engine's A/A false-alarm rate and its power at a true 1.3x slow-down, idle and under load.

Real timings of a real small kernel (single-threaded NumPy matrix products): the head repeats the base's
work 13 times where the base does it 10 times (1.3x the work), or the same 10 times (A/A). Each comparison
is what ``attnbench ab`` does: interleaved rounds, base and head in a random order each round, each side's
fastest of a few calls, judged by :func:`harness.analysis.comparison.judge_paired` at the default threshold
(10%) and a 95% interval. Each comparison is one cell (its whole alpha): the false-alarm bound is 2.5%.

Both clocks are measured: the CPU time of this process (``ab``'s default for CPU cells on one thread) and the
wall clock. "Under load" starts busy loops of its own (``--spinners`` processes, default 2, spinning for the
measurement's length only) beside the timing. It prints the CPU, the load average and a table:

    PYTHONPATH=. python3 benchmarks/comparison_power.py            # 300 comparisons per row: about 8 minutes on 2 cores
    PYTHONPATH=. python3 benchmarks/comparison_power.py --quick    # 20 per row: under a minute
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import statistics
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # one thread, as ab's default; before NumPy loads BLAS
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import numpy as np

from harness.analysis.comparison import DEFAULT_ALPHA, DEFAULT_THRESHOLD, SLOWER, judge_paired

SIZE = 96
BASE_REPS, HEAD_REPS = 10, 13
CALLS = 3


def _spin(seconds: float) -> None:
    end = time.monotonic() + seconds
    x = 0
    while time.monotonic() < end:
        x += 1


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()


def kernel(reps: int, a: np.ndarray, b: np.ndarray) -> float:
    out = a
    for _ in range(reps):
        out = (out @ b) * 0.01
    return float(out[0, 0])


def one_comparison(head_reps: int, rounds: int, clock: str, rng: random.Random, a: np.ndarray,
                   b: np.ndarray) -> tuple[str, float, float | None]:
    """(verdict, ratio, MDE) of one comparison timed in ``rounds`` interleaved rounds."""
    read = time.process_time if clock == "cpu" else time.perf_counter
    reps = {"base": BASE_REPS, "head": head_reps}
    ratios = []
    for _ in range(rounds):
        order = ["base", "head"]
        rng.shuffle(order)
        best: dict[str, float] = {}
        for side in order:
            kernel(reps[side], a, b)  # warm-up call
            times = []
            for _ in range(CALLS):
                start = read()
                kernel(reps[side], a, b)
                times.append(read() - start)
            best[side] = min(times)
        ratios.append(best["head"] / best["base"])
    verdict = judge_paired(ratios, DEFAULT_THRESHOLD, DEFAULT_ALPHA)
    return verdict.verdict, verdict.ratio, verdict.mde_or_none


def measure(trials: int, rounds: int, clock: str, seed: int) -> dict[str, object]:
    rng = random.Random(seed)
    data = np.random.default_rng(seed)
    a, b = data.standard_normal((SIZE, SIZE)), data.standard_normal((SIZE, SIZE))
    aa = [one_comparison(BASE_REPS, rounds, clock, rng, a, b) for _ in range(trials)]
    slow = [one_comparison(HEAD_REPS, rounds, clock, rng, a, b) for _ in range(trials)]
    mdes = [m for _, _, m in aa + slow if m is not None]
    return {"alarms": sum(v == SLOWER for v, _, _ in aa), "found": sum(v == SLOWER for v, _, _ in slow),
            "aa_ratio": statistics.median(r for _, r, _ in aa), "slow_ratio": statistics.median(r for _, r, _ in slow),
            "slow_range": (min(r for _, r, _ in slow), max(r for _, r, _ in slow)),
            "mde": statistics.median(mdes) if mdes else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="20 comparisons per row instead of 300")
    parser.add_argument("--trials", type=int, help="comparisons per row (A/A, and as many at 1.3x)")
    parser.add_argument("--rounds", type=int, default=20, help="interleaved rounds per comparison (default 20, as ab)")
    parser.add_argument("--spinners", type=int, default=2, help="busy-loop processes under load (default 2)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    trials = args.trials or (20 if args.quick else 300)
    print(f"CPU: {cpu_model()}, {os.cpu_count()} cores; {trials} A/A and {trials} 1.3x comparisons per row, "
          f"{args.rounds} rounds each, threshold {DEFAULT_THRESHOLD:.0%}, 95% interval (false-alarm bound "
          f"{DEFAULT_ALPHA / 2:.1%})")
    header = (f"{'condition':<22} {'clock':<5} {'load':>9} {'A/A false alarms':>17} {'found at 1.3x':>14} "
              f"{'1.3x ratio (median, range)':>28} {'median MDE':>11} {'seconds':>8}")
    print(header)
    print("-" * len(header))
    for loaded in (False, True):
        spinners: list[multiprocessing.Process] = []
        for clock in ("cpu", "wall"):
            if loaded and not spinners:
                budget = 4.0 * trials * args.rounds * 0.01 + 60  # bounded: the spinners stop on their own
                spinners = [multiprocessing.Process(target=_spin, args=(budget,), daemon=True)
                            for _ in range(args.spinners)]
                for p in spinners:
                    p.start()
                time.sleep(2.0)
            before = os.getloadavg()[0]
            started = time.perf_counter()
            result = measure(trials, args.rounds, clock, args.seed + (10 if loaded else 0) + (1 if clock == "wall" else 0))
            elapsed = time.perf_counter() - started
            after = os.getloadavg()[0]
            low, high = result["slow_range"]  # type: ignore[misc]
            mde = result["mde"]
            condition = f"{args.spinners} busy loops" if loaded else "idle (none started)"
            print(f"{condition:<22} {clock:<5} {before:>4.1f}-{after:<4.1f} "
                  f"{result['alarms']:>3}/{trials:<3} ({result['alarms'] / trials:>4.0%}) "
                  f"{result['found']:>3}/{trials:<3} ({result['found'] / trials:>4.0%}) "
                  f"{result['slow_ratio']:>8.3f}x ({low:.2f}-{high:.2f})     "
                  f"{'none' if mde is None else f'{mde:.3f}x':>9} {elapsed:>8.0f}", flush=True)
        for p in spinners:
            p.terminate()
            p.join()


if __name__ == "__main__":
    main()
