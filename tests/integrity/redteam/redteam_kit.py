"""Shared tools of the red-team plugins (not a plugin: it registers nothing).

An adversary that has read ``harness/bench/`` knows the physics floor's formula (harness.bench.roofs): the
larger of 2x the run's measured GEMM peak and a theoretical roof. A cheat that returns a cached answer in
microseconds is under it; a cheat that *paces* its calls to a small margin above it is not. :func:`pace`
spins until :data:`PACE` times that floor has passed since the call started, so every "does no work" cheat
here reads as a plausible, very fast kernel instead of an impossible one.
"""

from __future__ import annotations

import gc
import os
import sys
import time

import torch
import torch.nn.functional as F

PACE = 1.3
"""Each paced call lasts this many times the floor the harness holds it against."""
_REAL_CLOCK = time.perf_counter  # bound at import: a clock cheat in the same process does not slow our pacing
_ROOF: dict[str, float] = {}


def attend(q, k, v, scale=None):
    """The honest answer (torch's SDPA), the work every cheat avoids in its timed calls."""
    return F.scaled_dot_product_attention(q, k, v, scale=scale)


def rows_every(q, k, v, scale, step):
    """Every ``step``-th query row computed, each copied to the ``step - 1`` rows after it: 1/step of the work,
    paced so the call is never under the floor."""
    started = now()
    rows = attend(q[..., ::step, :], k, v, scale)
    out = rows.repeat_interleave(step, dim=-2)[..., :q.shape[-2], :].contiguous()
    pace(started, q, k, v)
    return out


def _roofs() -> tuple[float, float]:
    """(GFLOP/s, GB/s) the floor divides by: the harness's theoretical roofs, or 2x a GEMM measured here, larger."""
    if not _ROOF:
        from harness.bench.roofs import cpu_roofs

        theory = cpu_roofs()
        a = torch.randn(512, 512)
        best = min(_timed(lambda: a @ a) for _ in range(5))
        measured = 2.0 * 2.0 * 512 ** 3 / best / 1e9 * 2.0  # 2x for the harness's SAFETY, 2x for more threads
        _ROOF["gflops"] = max(theory.gflops.get("float32", 0.0), measured)
        _ROOF["gbps"] = theory.load_gbps
    return _ROOF["gflops"], _ROOF["gbps"]


def _timed(fn) -> float:
    t0 = _REAL_CLOCK()
    fn()
    return _REAL_CLOCK() - t0


def floor_s(q, k, v) -> float:
    """The harness's physics floor of a forward call on these inputs (harness.reference.flops' count, roofs above)."""
    gflops, gbps = _roofs()
    b, h, tq, d = q.shape
    tk = k.shape[-2]
    flops = 4.0 * b * h * tq * tk * d
    nbytes = (2 * q.numel() + k.numel() + v.numel()) * q.element_size()
    return max(flops / (gflops * 1e9), nbytes / (gbps * 1e9))


def pace(started: float, q, k, v) -> None:
    """Spin until :data:`PACE` x the floor has passed since ``started`` (a :data:`_REAL_CLOCK` reading)."""
    until = started + PACE * floor_s(q, k, v)
    while _REAL_CLOCK() < until:
        pass


def in_bench() -> bool:
    """Whether this process is a bench timing worker (it has loaded the bench's modules); under ``verify``
    every cheat here does honest work, so it passes verify, as a cheat must to be worth timing."""
    return any(name.startswith("harness.bench.") for name in list(sys.modules))


def now() -> float:
    return _REAL_CLOCK()


_FOUND: list = []


def find_loop():
    """The harness's live timing loop object (harness.bench.loop.RoundedLoop), found among the interpreter's
    objects without touching a frame (scanned once, then remembered while it runs); None before one exists."""
    if _FOUND and not _FOUND[0].done:
        return _FOUND[0]
    loops = sys.modules.get("harness.bench.loop")
    kind = getattr(loops, "RoundedLoop", None)
    if kind is None:
        return None
    for obj in gc.get_objects():
        if type(obj) is kind and not getattr(obj, "done", True):
            _FOUND[:] = [obj]
            return obj
    return None


def bench_option(flag: str, default: str) -> str:
    """A value of the bench's command line, read from an ancestor process (an adversary reads its settings)."""
    pid = os.getppid()
    for _ in range(4):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                args = f.read().decode(errors="replace").split("\0")
            with open(f"/proc/{pid}/stat") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
        if flag in args and args.index(flag) + 1 < len(args):
            return args[args.index(flag) + 1]
        pid = parent
    return default


def frame_local(name: str, function: str | None = None):
    """A local variable of the nearest calling frame (of ``function``, when given) that holds ``name``."""
    frame = sys._getframe(1)
    while frame is not None:
        if name in frame.f_locals and (function is None or frame.f_code.co_name == function):
            return True, frame.f_locals[name]
        frame = frame.f_back
    return False, None


def slow_clock_globals(rate: float) -> int:
    """Replace ``time.perf_counter`` and every module global holding it with a clock running at ``rate``; the count."""
    real = _REAL_CLOCK

    def slow() -> float:
        return real() * rate
    count = 0
    for module in list(sys.modules.values()):
        space = getattr(module, "__dict__", None)
        if not isinstance(space, dict) or space is globals():
            continue
        for name, value in list(space.items()):
            if value is real:
                space[name] = slow
                count += 1
    time.perf_counter = slow
    return count
