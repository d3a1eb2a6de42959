"""The physics floor of a cell: no correct computation of it takes less than
``max(FLOPs / compute roof, compulsory bytes / memory roof)``.

The run's measured GEMM peak and bandwidth are what the libraries reached, floors of what the
machine can do (a good decode kernel reads faster than ``torch.sum``), so the roofs here are honest
*upper* estimates, the larger of:

- **theory** (CPU): logical CPUs x clock x :data:`BOOST` x FLOPs per cycle per core of the best
  vector unit the CPU reports (:data:`FLOPS_PER_CYCLE`: two FMA pipes of the widest vectors, or an
  AMX tile unit, counting a multiply-add as two FLOPs) for the compute roof; for the memory roof the
  same cores x clock x :data:`LOAD_BYTES_PER_CYCLE`, what the L1 cache can feed, faster than any
  memory behind it. The clock is the highest any CPU reports (``cpufreq``'s maximum, else
  ``/proc/cpuinfo``'s MHz), times :data:`BOOST` because a virtual machine reports its base clock;
  without either, :data:`UNKNOWN_GHZ`. Counting SMT siblings as cores over-estimates again.
- **measured** x :data:`SAFETY`: the fastest GEMM call and the higher bandwidth reading of the run.

Every estimate errs upward, so the floor errs downward: a cell under it did not do its work.

A cell timed in rounds has a tighter compute roof beside it: the fastest GEMM call the roof probe read in
the same rounds (:mod:`harness.bench.rounds`), or the run's fastest peak call when higher, times the
CPU's headroom over the GEMM's vector unit (``gemm_headroom``: AVX-512's FLOPs per cycle over AVX2's,
since torch's GEMM may run AVX2 code where wider units exist) times :data:`BESIDE_MARGIN`. The
compute roof is the lower of that and the estimate above.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from harness.results import Bandwidth, Floor, Peak, Record

SAFETY = 2.0
"""Measured readings times this: what the libraries reached is at least half what the machine can do."""
BOOST = 2.0
"""Clock multiplier: no server CPU's boost clock is twice its reported base (EPYC 2.6 -> 3.7 GHz)."""
BESIDE_MARGIN = 1.1
"""Over the GEMM read beside a cell (times the vector headroom): a 512 x 512 GEMM reaches about 90% of its
vector unit's peak, and no kernel exceeds that unit's peak. An honest fused kernel measured at 127-161% of
torch's fp32 GEMM on a Zen 5 (AVX-512, headroom 2) stays under 2 x 1.1 = 220%."""
UNKNOWN_GHZ = 6.0
"""No shipping CPU core runs faster."""
LOAD_BYTES_PER_CYCLE = 192
"""Three 64-byte loads per cycle per core: more than any x86 or Arm core's L1 delivers."""
FLOPS_PER_CYCLE: dict[str, dict[str, int]] = {
    # feature flag: dtype -> FLOPs per cycle per core (2 pipes x lanes x 2 for a multiply-add)
    "amx_bf16": {"bfloat16": 2048}, "amx_fp16": {"float16": 2048},
    "avx512_fp16": {"float16": 128}, "avx512_bf16": {"bfloat16": 128},
    "avx512f": {"float64": 32, "float32": 64, "float16": 64, "bfloat16": 64},
    "fma": {"float64": 16, "float32": 32, "float16": 32, "bfloat16": 32},
    "sve": {"float64": 32, "float32": 64, "float16": 128, "bfloat16": 128},  # 512-bit SVE, the widest shipped
    "asimd": {"float64": 8, "float32": 16, "float16": 32, "bfloat16": 32},
}
UNKNOWN_FLOPS_PER_CYCLE = 2048
"""An ISA none of the above names: as many as an AMX unit, so the floor never binds wrongly."""


def _cpu_info() -> tuple[set[str], float | None]:
    """The CPU feature flags and the highest clock (GHz) this machine reports; (set(), None) when unknown."""
    flags: set[str] = set()
    mhz: list[float] = []
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip().lower()
                if key in ("flags", "features"):
                    flags |= set(value.split())
                elif key == "cpu mhz":
                    mhz.append(float(value))
    except (OSError, ValueError):
        pass
    for path in glob.glob("/sys/devices/system/cpu/cpu*/cpufreq/cpuinfo_max_freq"):
        try:
            with open(path) as f:
                mhz.append(int(f.read()) / 1000)
        except (OSError, ValueError):
            continue
    return flags, (max(mhz) / 1000 if mhz else None)


def cpu_flags() -> set[str]:
    """The CPU feature flags this machine reports (empty when unknown)."""
    return _cpu_info()[0]


@dataclass(frozen=True, eq=False, kw_only=True)
class Roofs(Record):
    """This machine's theoretical roofs: GFLOP/s per dtype and load GB/s, and how they were derived."""

    gflops: Mapping[str, float] = field(default_factory=dict)
    load_gbps: float = 0.0
    method: str = ""


def cpu_roofs() -> Roofs:
    """Theoretical upper roofs of this machine's CPUs: GFLOP/s per dtype and load GB/s, with the inputs."""
    flags, ghz = _cpu_info()
    cores = os.cpu_count() or 1
    clock = UNKNOWN_GHZ if ghz is None else ghz * BOOST
    per_cycle: dict[str, int] = {}
    for flag, rates in FLOPS_PER_CYCLE.items():
        if flag in flags:
            for dtype, rate in rates.items():
                per_cycle[dtype] = max(per_cycle.get(dtype, 0), rate)
    for dtype in ("float64", "float32", "float16", "bfloat16"):
        per_cycle.setdefault(dtype, UNKNOWN_FLOPS_PER_CYCLE)
    reported = "unknown clock" if ghz is None else f"{ghz:.2f} GHz reported x {BOOST:g}"
    return Roofs(gflops={d: cores * clock * r for d, r in per_cycle.items()}, load_gbps=cores * clock * LOAD_BYTES_PER_CYCLE,
                 method=f"{cores} logical CPUs x {clock:.2f} GHz ({reported}) x FLOPs/cycle {per_cycle}; "
                        f"loads {LOAD_BYTES_PER_CYCLE} B/cycle")


def physics_floor(flops: float, nbytes: float, dtype: str, device: str, peak: Peak | Mapping[str, object] | None,
                  bandwidth: Bandwidth | Mapping[str, object] | None, theory: Roofs | Mapping[str, object] | None,
                  beside_gflops: float | None = None, headroom: float | None = None,
                  threads_gflops: float | None = None) -> Floor:
    """The floor in seconds and how it was derived (roofs in GFLOP/s and GB/s, each the larger estimate; the
    compute roof no higher than the GEMM read beside the cell x ``headroom`` x :data:`BESIDE_MARGIN`, where that
    GEMM is the fastest of ``beside_gflops`` (on the cell's clock), the run's fastest peak call and
    ``threads_gflops``, one thread's GEMM on its own CPU clock x the threads the cell may run on, which load
    cannot lower). The records may be given in their stored form (JSON objects)."""
    gemm = Peak.coerce(peak or {})
    stream = Bandwidth.coerce(bandwidth or {})
    roofs = None if theory is None or device != "cpu" else Roofs.coerce(theory)
    measured_gflops = SAFETY * max(gemm.fastest_call_gflops or 0.0, gemm.gflops or 0.0)
    measured_gbps = SAFETY * max(stream.read_gbps or 0.0, stream.copy_gbps or 0.0)
    theory_gflops, theory_gbps = (roofs.gflops.get(dtype, 0.0), roofs.load_gbps) if roofs is not None else (0.0, 0.0)
    compute = max(measured_gflops, theory_gflops)
    beside = _beside_roof(beside_gflops, gemm, headroom, threads_gflops)
    if beside is not None:
        compute = min(compute, beside) if compute else beside
    memory = max(measured_gbps, theory_gbps)
    compute_s, memory_s = _seconds(flops, compute), _seconds(nbytes, memory)
    how = (f"compute roof max({SAFETY:g} x measured {measured_gflops / SAFETY:.4g}, theory {theory_gflops:.4g}) GFLOP/s"
           + _beside_words(max(beside_gflops or 0.0, threads_gflops or 0.0), headroom, beside) + "; "
           f"memory roof max({SAFETY:g} x measured {measured_gbps / SAFETY:.4g}, theory {theory_gbps:.4g}) GB/s"
           + (f"; theory: {roofs.method}" if roofs is not None else ""))
    return Floor(floor_s=max(compute_s, memory_s), compute_roof_gflops=compute, memory_roof_gbps=memory,
                 compute_s=compute_s, memory_s=memory_s, how=how)


def _beside_roof(beside_gflops: float | None, gemm: Peak, headroom: float | None,
                 threads_gflops: float | None = None) -> float | None:
    """The compute roof the GEMM read beside the cell sets (None when none was read): the fastest of it, the
    run's fastest peak call and the threads' CPU-clock GEMM, x the vector headroom x :data:`BESIDE_MARGIN`."""
    if not beside_gflops:
        return None
    fastest = max(beside_gflops, gemm.fastest_call_gflops or 0.0, threads_gflops or 0.0)
    return fastest * max(1.0, headroom or 1.0) * BESIDE_MARGIN


def _beside_words(beside_gflops: float | None, headroom: float | None, beside: float | None) -> str:
    """How the GEMM beside the cell capped the compute roof, for the floor's ``how`` (empty when it did not)."""
    if beside is None or not beside_gflops:
        return ""
    return (f", at most the GEMM beside the cell {beside_gflops:.4g} x headroom {max(1.0, headroom or 1.0):g} "
            f"x {BESIDE_MARGIN:g} = {beside:.4g}")


def _seconds(work: float, per_second_e9: float) -> float:
    """``work`` (FLOPs or bytes) at ``per_second_e9`` (GFLOP/s or GB/s); 0 when either is 0."""
    return work / (per_second_e9 * 1e9) if per_second_e9 and work else 0.0
