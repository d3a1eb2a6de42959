"""How the benchmarks here time calls against each other and say under what load: written once, so every
script's figures are taken and labelled alike (``from benchmarks.measuring import ...``, the checkout on
``PYTHONPATH`` as every script here runs)."""

from __future__ import annotations

import os
import random
import statistics
import time
from collections.abc import Callable, Sequence


def interleaved(calls: Sequence[Callable[[], object]], rounds: int, best: list[float] | None = None) -> list[float]:
    """Median seconds of each call, called in turn ``rounds`` times after one warm-up round; ``best`` (when
    given) receives each call's fastest time: on a loaded machine, the figure least disturbed by others.
    Each round calls them in a new order (seeded shuffle): a call can run slower for what ran just before it
    (threads another operation left spinning on the cores, caches and TLB it emptied), so no contestant
    always follows the same one. Ratios of these medians are the figures that hold on a busy machine."""
    times: list[list[float]] = [[] for _ in calls]
    order = list(range(len(calls)))
    shuffle = random.Random(0).shuffle
    for r in range(rounds + 1):
        shuffle(order)
        for i in order:
            start = time.perf_counter()
            calls[i]()
            if r:  # the first round warms up
                times[i].append(time.perf_counter() - start)
    if best is not None:
        best[:] = [min(t) for t in times]
    return [statistics.median(t) for t in times]


def load_average() -> str:
    """"load average 1.02 0.98 0.87": printed beside every figure (one, five and fifteen minutes)."""
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())
