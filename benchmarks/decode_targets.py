"""tiled_decode's targets (decode with a KV cache), printed, measured in one process.

    PYTHONPATH=. python3 benchmarks/decode_targets.py [--isa avx2 avx512] [--kv float32 bfloat16 float16]
                                                      [--rounds 5] [--threads 2] [--no-sdpa] [--more] [--claims FILE]

Each comparison calls its contestants in turn, in a new (seeded) order each round (one warm-up round, then
``--rounds``) together with the read-bandwidth probe (``torch.sum`` over a float32 buffer of as many bytes as the K and V
the step reads), and compares medians: on a machine shared with other jobs the load moves all of them alike
(the headline also prints the ratio of the fastest rounds, the figure least disturbed by other jobs).
The load average is printed before and after. Nothing here asserts anything: these are figures to report.

1. B = 8, H 32/8, d = 128, Tq = 1, Tk = 32,768, per instruction-set tier the CPU has (``--isa``) and per KV
   cache dtype (``--kv``): tiled_decode's GB/s of the bytes it reads (K and V in the cache's dtype, an FP8
   cache's per-token float32 scales, q and the output once) as a share of the probe's (targets: >= 75% for
   float32 and both FP8 dtypes, >= 70% for bfloat16 and float16), and torch_sdpa (enable_gqa=True, float32 only;
   for an FP8 cache, on K and V dequantized to float32 beforehand, untimed) time / ours. ``--batch`` shrinks the case where memory is short
   (SDPA expands the shared K and V per query head: ~10 GiB at B8). Beside them, "in cache GB/s": the same
   tier's rate on caches that stay in each core's L2, the rate its arithmetic allows; where the probe reads
   faster than that, the step is bound by arithmetic, not by the memory, and its share falls. That measured
   roof bounds the share: "reachable" is in-cache / probe (at most 100%), and where it is under the target the
   verdict says the target is out of reach on this CPU by that roof (and how much of the reachable share the
   kernel reached), instead of a plain miss. The CPU (name, family, model, vector features) heads the output:
   a Zen 4 and a Zen 5 are both "AMD EPYC", and their figures differ.
With ``--more``, at the highest tier and float32:
2. Tk sweep 1,024 ... 65,536 (B = 4, H 32/8): the fitted exponent of time in Tk (target about 1); the sizes
   alternate with each other, not with the read (decode steps run back to back).
3. B = 1, MQA (H 32/1), Tk = 65,536 and 262,144: share of the read bandwidth (target >= 50%).
4. B = 8, H 32/8, Tk = 16,384: a paged cache of 16-token pages (shuffled) against the contiguous cache
   (target: within 15%).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from benchmarks.claims_record import Claims, cpu_heading
from benchmarks.measuring import interleaved, load_average
from harness.analysis.scaling import fit_exponent
from harness.bench.bandwidth import STREAM_BYTES
from harness.bench.peak import measure_gemm_peak
from harness.case.paging import make_pages
from implementations.tiled_decode import decode_attention, default_tier, in_cache_gbps, tiers, use_isa

D = 128
TARGETS = {"float32": 75, "bfloat16": 70, "float16": 70, "float8_e4m3fn": 75, "float8_e5m2": 75}
"""Share of the measured read bandwidth tiled_decode should reach, per KV cache dtype (percent)."""
CLAIMS: Claims | None = None
"""Set by ``--claims FILE``: every figure printed is also kept for ``python3 -m benchmarks.claims``."""


def _claim(claim: str, value: float, unit: str, target: str, met: bool | None, detail: str = "", tier: str = "",
           reachable: float | None = None) -> None:
    if CLAIMS is not None:
        CLAIMS.add(claim, value, unit, target, met, detail, tier, reachable)


def _cache(b: int, h: int, hkv: int, tk: int, kv: torch.dtype = torch.float32
           ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    return (torch.randn(b, h, 1, D, generator=gen), torch.randn(b, hkv, tk, D, generator=gen).to(kv),
            torch.randn(b, hkv, tk, D, generator=gen).to(kv))


def _bytes(b: int, h: int, hkv: int, tk: int, kv_item: int = 4) -> int:
    """Bytes a step reads and writes: K and V in the cache's dtype (an FP8 cache with a float32 scale per row),
    q and the output in float32."""
    scales = 4 * 2 * b * hkv * tk if kv_item == 1 else 0
    return kv_item * 2 * b * hkv * tk * D + scales + 4 * 2 * b * h * D


def _gbps(b: int, h: int, hkv: int, tk: int, seconds: float, kv_item: int = 4) -> float:
    return _bytes(b, h, hkv, tk, kv_item) / seconds / 1e9


def headline(isas: list[str], kvs: list[str], rounds: int, sdpa: bool, batch: int = 8) -> None:
    """Target 1: per tier and KV dtype, % of the read bandwidth measured beside it (and SDPA in float32)."""
    print(f"B{batch} H32/8 d128 Tq1 Tk32768:")
    print("| tier | KV cache | tiled_decode ms | GB/s | probe GB/s | % of read BW (target) | best of rounds | "
          "in cache GB/s | reachable | verdict | torch_sdpa / ours |")
    print("|---|---|---|---|---|---|---|---|---|---|---|", flush=True)
    for kv in kvs:
        _headline_rows(kv, isas, rounds, sdpa and kv in ("float32", "float8_e4m3fn", "float8_e5m2"), batch)


def reachability(share: float, target: float, in_cache: float, probe: float) -> tuple[float | None, str]:
    """The share the tier's measured in-cache rate allows over the probe's (None where it was not measured) and
    the verdict: met; out of reach on this CPU by that roof (the reachable share under the target); or missed."""
    reachable = min(100.0, 100 * in_cache / probe) if in_cache > 0 and probe > 0 else None
    if share >= target:
        return reachable, "met"
    if reachable is not None and reachable < target:
        return reachable, (f"out of reach on this CPU: its in-cache roof allows {reachable:.0f}% < {target:.0f}%; "
                           f"{100 * share / reachable:.0f}% of that reached")
    return reachable, "missed" + ("" if reachable is not None else " (in-cache roof not measured)")


def _headline_rows(kv: str, isas: list[str], rounds: int, sdpa: bool, batch: int) -> None:
    """One KV dtype: the probe, every tier and (float32) SDPA called in turn, ``rounds`` times."""
    dtype = getattr(torch, kv)
    item = torch.finfo(dtype).bits // 8
    q, k, v = _cache(batch, 32, 8, 32768, dtype)
    probe = torch.ones(_bytes(batch, 32, 8, 32768, item) // 4)
    gen = torch.Generator().manual_seed(1)
    scales = ({"k_scale": torch.rand(batch, 8, 32768, generator=gen) + 0.5,
               "v_scale": torch.rand(batch, 8, 32768, generator=gen) + 0.5} if item == 1 else {})

    def ours(isa: str) -> Callable[[], object]:
        return lambda: decode_attention(q, k, v, isa=isa, **scales)

    calls: list[Callable[[], object]] = [probe.sum, *(ours(isa) for isa in isas)]  # the tiers take turns too
    if sdpa:
        kd, vd = ((k, v) if not scales else
                  (k.float() * scales["k_scale"].unsqueeze(-1), v.float() * scales["v_scale"].unsqueeze(-1)))
        calls.append(lambda: F.scaled_dot_product_attention(q, kd, vd, enable_gqa=True))
    best: list[float] = []
    t = interleaved(calls, rounds, best)
    bw = probe.numel() * 4 / t[0] / 1e9
    for i, isa in enumerate(isas, start=1):
        gbps = _gbps(batch, 32, 8, 32768, t[i], item)
        ratio = f"{t[-1] / t[i]:.1f}x" if len(t) > len(isas) + 1 else "-"
        cached = in_cache_gbps(isa, dtype)  # the tier's arithmetic roof, measured beside the step
        share = 100 * gbps / bw
        reachable, verdict = reachability(share, TARGETS[kv], cached, bw)
        shown = "-" if reachable is None else f"{reachable:.0f}%"
        print(f"| {isa} | {kv} | {1e3 * t[i]:.1f} | {gbps:.1f} | {bw:.1f} | {share:.0f}% "
              f"(>= {TARGETS[kv]}%) | {100 * best[0] / best[i]:.0f}% | {cached:.0f} | {shown} | {verdict} | {ratio} |",
              flush=True)
        out_of_reach = verdict.startswith("out of reach")
        _claim(f"B{batch} H32/8 Tq1 Tk32,768, {kv} cache: share of the read bandwidth", share, "%",
               f">= {TARGETS[kv]}%", share >= TARGETS[kv],
               f"{gbps:.1f} of {bw:.1f} GB/s, {1e3 * t[i]:.1f} ms; {cached:.0f} GB/s with the cache in L2"
               + (f"; {verdict}" if out_of_reach else ""), isa, reachable if out_of_reach else None)
        if len(t) > len(isas) + 1:
            _claim(f"same, {kv} cache: torch_sdpa(enable_gqa) time / ours", t[-1] / t[i], "x", ">= 5", t[-1] / t[i] >= 5,
                   f"{1e3 * t[-1]:.0f} ms against {1e3 * t[i]:.1f} ms", isa)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--isa", nargs="+", choices=("avx2", "avx512"), help="tiers to measure (default: all the CPU has)")
    parser.add_argument("--kv", nargs="+", choices=tuple(TARGETS), default=list(TARGETS), help="KV cache dtypes")
    parser.add_argument("--no-sdpa", action="store_true", help="skip torch_sdpa (at B8 it needs ~10 GiB: GQA expanded)")
    parser.add_argument("--batch", type=int, default=8, help="batch of the headline case (8; less where memory is short)")
    parser.add_argument("--more", action="store_true", help="also the Tk sweep, MQA and paged comparisons")
    parser.add_argument("--claims", type=Path, help="also write the figures for python3 -m benchmarks.claims")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    have = tiers()
    global CLAIMS
    if args.claims:
        CLAIMS = Claims("tiled_decode, d = 128 (shares of the read bandwidth measured beside it)", isa=", ".join(have))
    isas = [i for i in (args.isa or have) if i in have]
    print(f"CPU: {cpu_heading()}", flush=True)
    defaults = ", ".join(f"{kv} {default_tier(getattr(torch, kv))}" for kv in args.kv)
    print(f"{load_average()}; threads {args.threads}; tiers here {', '.join(have)} (default per cache: {defaults}); "
          f"measuring {', '.join(isas)}", flush=True)
    headline(isas, args.kv, args.rounds, not args.no_sdpa, args.batch)
    if not args.more:
        print(load_average())
        if CLAIMS is not None and args.claims:
            CLAIMS.write(args.claims)
        return
    print(f"tier {use_isa(have[-1])}, float32 cache", flush=True)  # the calls below run on the highest tier
    stream = torch.ones(STREAM_BYTES // 4)
    read = stream.sum

    def bandwidth(seconds: float) -> float:
        return STREAM_BYTES / seconds / 1e9

    # 2. time against Tk
    sizes = (1024, 4096, 16384, 65536)
    caches = {tk: _cache(4, 32, 8, tk) for tk in sizes}
    # The sizes alternate with each other only: a call right after the 256 MiB read (or any pause) starts with
    # cold caches, TLB and sleeping worker threads, a fixed ~1-5 ms that would bend the fit at small Tk.
    t = interleaved([read], args.rounds) + interleaved([(lambda c=caches[tk]: decode_attention(*c)) for tk in sizes],
                                                         args.rounds)
    fit = fit_exponent([float(s) for s in sizes], t[1:])
    print("2. B4 H32/8 Tk sweep: " + ", ".join(f"{tk}: {1e3 * s:.2f} ms ({100 * _gbps(4, 32, 8, tk, s) / bandwidth(t[0]):.0f}%)"
                                                for tk, s in zip(sizes, t[1:]))
          + f"; time exponent in Tk {fit.slope:.2f} (R2 {fit.r2:.3f}; target about 1)", flush=True)
    _claim("B4 H32/8 Tk 1,024 .. 65,536, float32: time exponent in Tk", fit.slope, "", "about 1 (0.85 .. 1.15)",
           abs(fit.slope - 1) <= 0.15, f"R2 {fit.r2:.3f}", have[-1])
    del caches

    # 3. MQA, one sequence: split-KV. 32 query rows per K/V row: 16 FLOPs per byte at d = 128, past this machine's
    # ridge point, so the fp32 GEMM peak (measured here) caps the share of bandwidth any fp32 kernel can reach.
    peak = measure_gemm_peak("float32", "cpu", threads=args.threads).gflops or 0.0
    for tk in (65536, 262144):
        mqa = _cache(1, 32, 1, tk)
        t = interleaved([read, lambda c=mqa: decode_attention(*c)], args.rounds)
        share = 100 * _gbps(1, 32, 1, tk, t[1]) / bandwidth(t[0])
        flops = 4.0 * 32 * tk * D
        ceiling = 100 * _gbps(1, 32, 1, tk, flops / (peak * 1e9)) / bandwidth(t[0])
        print(f"3. B1 H32/1 (MQA) Tk{tk}: {1e3 * t[1]:.2f} ms = {_gbps(1, 32, 1, tk, t[1]):.1f} GB/s = {share:.0f}% of "
              f"{bandwidth(t[0]):.1f} GB/s (target >= 50%); {flops / t[1] / 1e9:.0f} GFLOP/s = "
              f"{100 * flops / t[1] / 1e9 / peak:.0f}% of the fp32 GEMM peak {peak:.0f}, which caps any fp32 kernel "
              f"at {ceiling:.0f}% of the bandwidth here", flush=True)
        _claim(f"B1 MQA H32/1 Tk{tk:,}, float32: share of the read bandwidth", share, "%", ">= 50%", share >= 50,
               f"{100 * flops / t[1] / 1e9 / peak:.0f}% of the fp32 GEMM peak ({peak:.0f} GFLOP/s), which caps any "
               f"fp32 kernel at {ceiling:.0f}% of the bandwidth", have[-1])

    # 4. paged against contiguous
    q, k, v = _cache(8, 32, 8, 16384)
    k_pages, v_pages, table = make_pages(k, v, 16, torch.Generator().manual_seed(1))
    lengths = torch.full((8,), 16384, dtype=torch.int32)
    t = interleaved([read, lambda: decode_attention(q, k, v),
                      lambda: decode_attention(q, k_pages, v_pages, cache_seqlens=lengths, block_table=table)],
                     args.rounds)
    print(f"4. B8 H32/8 Tk16384: contiguous {1e3 * t[1]:.1f} ms, paged (16-token pages, shuffled) {1e3 * t[2]:.1f} ms: "
          f"paged / contiguous = {t[2] / t[1]:.2f} (target <= 1.15)", flush=True)
    print(load_average())
    _claim("B8 H32/8 Tk16,384, float32: 16-token pages / contiguous cache", t[2] / t[1], "x", "<= 1.15",
           t[2] / t[1] <= 1.15, f"{1e3 * t[2]:.1f} ms against {1e3 * t[1]:.1f} ms", have[-1])
    if CLAIMS is not None and args.claims:
        CLAIMS.write(args.claims)


if __name__ == "__main__":
    main()
