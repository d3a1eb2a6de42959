"""Every timed call fingerprinted as it returns; which ones are checked against float64 is decided after the loop.

Right after a timed call returns (its type checked, the interpreter's state read), the loop takes a
Freivalds-style fingerprint of each array it returned: ``f = out @ r`` in float64, ``r`` a fresh
Gaussian vector over the last (value) dimension drawn *after* the return from a generator seeded
from ``os.urandom``. O(T x d) per call, the same for every call: nothing a plugin can observe
differs between a call that will be checked and one that will not. A call cannot hand back an
output that is filled in later (by a thread, a lazy tensor, a mode that runs when the output is
first read): the fingerprint reads it before the harness does anything else with it.

After the last call the loop draws, from the system's entropy, which calls to check
(:data:`RANDOM_CHECKS` of them besides the first and the last). Each is checked on the inputs it
saw (regenerated from its seed, :mod:`harness.bench.fresh`): the float64 reference of the chosen rows
(all when the case is small) projected on the same ``r``, against verify's bound for the case
(:mod:`harness.reference.tolerance`): an element-wise bound ``b`` on the output gives ``|(out - ref) . r| <=
b sum_j |r_j|`` for every row, so an honest output never fails, and an output wrong by more than the
bound in any element of a checked row fails with probability 1 (``r`` is continuous, drawn after the
output existed). A plugin that cheats on a fraction p of its calls is caught with probability about
1 - (1 - p)^checks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

RANDOM_CHECKS = 3
"""Calls checked besides the first and the last, drawn after the loop ended."""


@dataclass
class Print:
    """One timed call as it returned: where it ran, its inputs' seed, its fingerprints, what was wrong with it."""

    index: int
    set_index: int
    seed: int | None
    """The seed of its fresh inputs (None: the set's inputs as prepared)."""
    vectors: tuple[torch.Tensor | None, ...]
    prints: tuple[torch.Tensor | None, ...]
    dtypes: tuple[str, ...]
    problem: str | None = None
    cpu_after_s: float | None = None
    untyped: bool = False
    """It returned something other than an exact array (nothing of it was read)."""


def parts(out: Any) -> tuple[Any, ...]:
    return out if isinstance(out, tuple) else (out,)


def dtypes(out: Any) -> tuple[str, ...]:
    from harness.reference.tensors import dtype_name

    return tuple("none" if p is None else dtype_name(p) if hasattr(p, "dtype") else type(p).__name__ for p in parts(out))


def fingerprint(out: Any, seed: int) -> tuple[tuple[torch.Tensor | None, ...], tuple[torch.Tensor | None, ...]]:
    """(vectors, fingerprints) of each array in ``out``: ``r`` drawn from ``seed`` (taken after the call returned)
    and ``out @ r`` in float64 (on the output's device, the result brought to the host)."""
    gen = torch.Generator().manual_seed(seed)
    vectors: list[torch.Tensor | None] = []
    prints: list[torch.Tensor | None] = []
    for p in parts(out):
        if p is None:
            vectors.append(None)
            prints.append(None)
            continue
        r = torch.randn(p.shape[-1] if p.ndim else 1, generator=gen, dtype=torch.float64)
        host = _host_array(p)
        if host is not None:  # NumPy reads the output's memory: no torch operator runs on it
            # einsum's own loop, one thread, no BLAS: a BLAS pool's threads spin for a while after each call, and in
            # bench's parent they would spin on the cores the next timed call runs on
            f = torch.from_numpy(np.asarray(np.einsum("...i,i->...", host, r.numpy()) if host.ndim
                                            else host * r.numpy()[0]))
        else:  # bfloat16 or a device tensor: torch converts it
            wide = p.detach().to(torch.float64)
            f = ((wide @ r.to(wide.device)) if wide.dim() else wide * r[0]).cpu()
        vectors.append(r)
        prints.append(f)
    return tuple(vectors), tuple(prints)


def _host_array(p: Any) -> Any:
    """``p`` as a float64 NumPy array read straight from its memory (``Tensor.numpy`` runs no operator, so no
    kernel or mode a plugin registered sees the read), or None where NumPy cannot view it."""
    if isinstance(p, np.ndarray):
        return p.astype(np.float64)
    if p.device.type != "cpu" or p.requires_grad or p.dtype not in (torch.float32, torch.float64, torch.float16):
        return None
    return p.numpy().astype(np.float64)


def choose(count: int, entropy: Any) -> list[int]:
    """The calls to check among ``count``: the first, the last and :data:`RANDOM_CHECKS` others, drawn now."""
    if count <= 0:
        return []
    chosen = {0, count - 1}
    others = list(range(1, count - 1))
    entropy.shuffle(others)
    chosen.update(others[:RANDOM_CHECKS])
    return sorted(chosen)


def projected_error(got: torch.Tensor, want: torch.Tensor, r: torch.Tensor, bound: float) -> tuple[float, float]:
    """(max |got - want . r| over the rows, the bound ``bound * sum |r|`` plus float64's own rounding of both)."""
    ref = want @ r
    slack = 1e-12 * float((want.abs() @ r.abs()).max()) if want.numel() else 0.0
    err = float((got - ref).abs().max()) if ref.numel() else 0.0
    if not bool(torch.isfinite(got).all()):
        err = float("inf")
    return err, bound * float(r.abs().sum()) + slack
