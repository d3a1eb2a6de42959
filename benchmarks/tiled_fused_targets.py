"""``tiled_fused``'s targets against ``torch_sdpa`` on each ISA tier (B1-H8-T4096, d = 64 and 128).

    PYTHONPATH=. python3 benchmarks/tiled_fused_targets.py [--rounds 5] [--bf16-peak 820] [--no-memory]
        [--isa avx2|avx512f|avx512_bf16|amx_bf16] [--d 64 128] [--only float32,fwd] [--json FILE] [--claims FILE]

``--isa`` runs both implementations as a CPU of that tier would: tiled_fused's kernels through
``ATTNBENCH_FUSED_ISA`` and torch's (SDPA's ATen kernels, MKL, oneDNN) through their own variables
(:data:`TIER_ENV`), set before torch loads (the script re-executes itself). Every line names the tier.

Timing: in this one process, each configuration's two implementations are called alternately
(sdpa, ours, sdpa, ours, ...; ``--rounds`` pairs after one warm-up pair) and compared by their median
times, so a load change on a shared machine hits both alike (``attnbench bench`` does the same in shuffled
rounds per case, :mod:`harness.bench.rounds`). The bf16 forward's GFLOP/s is also given as a share
of the bf16 GEMM peak: the one given by --bf16-peak and the fastest 1024^3 torch.matmul measured here.
Memory: ``attnbench bench`` (each cell in its own process) measures the forward's peak extra memory
at T = 1024, 2048, 4096, and the script prints its exponent in T.
``--json FILE`` also writes the figures as ``{"tier", "machine": {cpu, tier, threads, torch, load_average
before and after}, "rows": [{"case", "d", "dtype", "mode", "causal", "sdpa_ms", "ours_ms", "ratio", "target",
"met", "gflops"}]}`` for tools that turn them into tables.
Nothing here asserts anything: these are targets to report, not tests.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from benchmarks.claims_record import Claims
from benchmarks.measuring import interleaved, load_average
from harness.cli import main as attnbench
from harness.runtime.cluster.node import cpu_model
from implementations._fused_kernels import tier
from implementations.tiled_fused import fused_flash_attention

TIER_ENV = {  # what each tier's CPU would run: ours, and torch's own dispatch (ATen, MKL, oneDNN)
    "avx2": {"ATTNBENCH_FUSED_ISA": "avx2", "ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2",
             "ONEDNN_MAX_CPU_ISA": "AVX2"},
    "avx512f": {"ATTNBENCH_FUSED_ISA": "avx512f", "ATEN_CPU_CAPABILITY": "avx512",
                "MKL_ENABLE_INSTRUCTIONS": "AVX512", "ONEDNN_MAX_CPU_ISA": "AVX512_CORE"},
    "avx512_bf16": {"ATTNBENCH_FUSED_ISA": "avx512_bf16", "ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16"},
    "amx_bf16": {"ATTNBENCH_FUSED_ISA": "amx_bf16"},
}

TARGETS = [(dtype, mode, causal) for dtype in ("bfloat16", "float32") for mode in ("fwd", "fwd+bwd")
           for causal in (False, True)]


def target(mode: str, causal: bool) -> float:
    """The ratio torch_sdpa time / tiled_fused time to reach, on every tier and dtype: forward 1.15
    (causal 1.2), forward + backward 1.1."""
    return (1.2 if causal else 1.15) if mode == "fwd" else 1.1


def machine(tier_name: str) -> dict:
    """What the figures came from: CPU model, the ISA tier tiled_fused ran, threads, torch, load average."""
    return {"cpu": cpu_model(), "tier": tier_name, "threads": torch.get_num_threads(), "torch": torch.__version__,
            "aten_capability": torch.backends.cpu.get_cpu_capability(),
            "load_average": [round(x, 2) for x in os.getloadavg()]}


def _bench(out: Path, *args: str) -> dict:
    argv = ["bench", "--only", "tiled_fused,torch_sdpa", "--heads", "8", "--batch", "1", "--out", str(out),
            "--force", "--quiet", *args]
    print("attnbench " + " ".join(argv), flush=True)
    attnbench(argv)
    return json.loads(out.read_text())


def _cells(doc: dict) -> dict[tuple, dict]:
    return {(c["implementation"], c["case"]["dtype"], c["case"]["d"], c["case"]["tq"], c["case"]["causal"],
             c["mode"]): c for c in doc["cells"] if c.get("status") == "ok"}


def _call(name: str, dtype: torch.dtype, d: int, causal: bool, mode: str) -> Callable[[], None]:
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 8, 4096, d).to(dtype).requires_grad_(mode != "fwd") for _ in range(3))
    grad = torch.randn(1, 8, 4096, d).to(dtype)

    def run() -> None:
        with torch.set_grad_enabled(mode != "fwd"):
            if name == "torch_sdpa":
                out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            else:
                out = fused_flash_attention(q, k, v, causal=causal)[0]
            if mode != "fwd":
                out.backward(grad)
                q.grad = k.grad = v.grad = None
    return run


def _bf16_peak() -> float:
    a = torch.randn(1024, 1024).bfloat16()
    best, began = math.inf, time.perf_counter()
    for _ in range(20):  # at most ~2 s: without bf16 units, oneDNN's bf16 GEMM can take seconds
        start = time.perf_counter()
        a @ a
        best = min(best, time.perf_counter() - start)
        if start - began > 2:
            break
    return 2 * 1024**3 / best / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--bf16-peak", type=float, default=820.0, help="bf16 GEMM peak, GFLOP/s (AVX512_BF16 Zen 4, 2 cores: ~820)")
    parser.add_argument("--out-dir", type=Path, default=Path("results"), help="for the memory run's result file")
    parser.add_argument("--no-memory", action="store_true")
    parser.add_argument("--isa", choices=sorted(TIER_ENV), help="run as a CPU of this tier would (see above)")
    parser.add_argument("--d", type=int, nargs="+", default=[64, 128])
    parser.add_argument("--only", default="", help="comma-separated dtypes/modes to keep, e.g. float32,fwd")
    parser.add_argument("--json", type=Path, help="also write the figures and the machine here (see above)")
    parser.add_argument("--claims", type=Path, help="also write them for python3 -m benchmarks.claims (claims_record.py)")
    args = parser.parse_args()
    if args.isa and any(os.environ.get(k) != v for k, v in TIER_ENV[args.isa].items()):
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **TIER_ENV[args.isa]})
    measured = _bf16_peak()
    keep = {w for w in args.only.split(",") if w}
    info = machine(args.isa or tier(torch.bfloat16))
    claims = Claims("tiled_fused against torch_sdpa, B1-H8-T4096 (torch_sdpa time / tiled_fused time)", isa=info["tier"])
    rows: list[dict] = []
    print(f"{info['cpu']}; tier {info['tier']}")
    print(f"B1-H8-T4096, {torch.get_num_threads()} threads, torch {torch.__version__} ({torch.backends.cpu.get_cpu_capability()}"
          f" kernels), {load_average()}; bf16 GEMM peak: given "
          f"{args.bf16_peak:.0f}, fastest 1024^3 matmul here {measured:.0f} GFLOP/s")
    print(f"{'tier':11} {'d':>4} {'dtype':9} {'mode':8} {'causal':6} {'sdpa ms':>9} {'ours ms':>9} {'ratio':>6}"
          f" {'target':>6} {'GFLOP/s':>8}  share of the bf16 peak (given, measured)", flush=True)
    for d in args.d:
        for dtype, mode, causal in TARGETS:
            if keep - {dtype, mode}:
                continue
            dt = getattr(torch, dtype)
            level = tier(dt)
            goal = target(mode, causal)
            t_sdpa, t_ours = interleaved([_call(n, dt, d, causal, mode) for n in ("torch_sdpa", "tiled_fused")],
                                          args.rounds)
            flops = 4 * 8 * 4096**2 * d / (2 if causal else 1) * (3.5 if mode == "fwd+bwd" else 1)  # bwd: 2.5 x fwd
            gflops, ratio = flops / t_ours / 1e9, t_sdpa / t_ours
            share = f"  {100 * gflops / args.bf16_peak:.0f}%, {100 * gflops / measured:.0f}%" \
                if dtype == "bfloat16" and mode == "fwd" and level == "avx512_bf16" else ""
            print(f"{level:11} {d:>4} {dtype:9} {mode:8} {causal!s:6} {1e3 * t_sdpa:9.1f} {1e3 * t_ours:9.1f} {ratio:6.2f}"
                  f" {goal:6.2f} {gflops:8.0f}{share}" + ("" if ratio >= goal else "  (missed)"), flush=True)
            rows.append({"case": f"{dtype} {mode} d={d}" + (" causal" if causal else ""), "tier": level, "d": d,
                         "dtype": dtype, "mode": mode, "causal": causal, "sdpa_ms": round(1e3 * t_sdpa, 3),
                         "ours_ms": round(1e3 * t_ours, 3), "ratio": round(ratio, 3), "target": goal,
                         "met": ratio >= goal, "gflops": round(gflops, 1)})
            claims.add(f"{dtype} {mode} d={d}" + (" causal" if causal else ""), ratio, "x", f">= {goal:.2f}",
                       ratio >= goal, f"sdpa {1e3 * t_sdpa:.1f} ms, ours {1e3 * t_ours:.1f} ms, {gflops:.0f} GFLOP/s", level)
    print(f"{load_average()} after")
    if args.claims:
        claims.write(args.claims)
    if args.json:
        info["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"tier": info["tier"], "machine": info, "rounds": args.rounds, "rows": rows},
                                        indent=1) + "\n")
    if args.no_memory:
        return
    args.out_dir.mkdir(parents=True, exist_ok=True)
    memory = _bench(args.out_dir / f"{time.strftime('%Y%m%d-%H%M%S')}-targets-memory.json", "--T", "1024", "2048",
                    "4096", "--d", "64", "--dtype", "float32", "bfloat16", "--causal", "off", "--mode", "fwd",
                    "--budget", "0.2", "--min-samples", "2")
    print("\nforward peak extra memory (KiB; beyond inputs and output) at T = 1024, 2048, 4096, exponent in T:")
    for name in ("tiled_fused", "torch_sdpa"):
        for dtype in ("float32", "bfloat16"):
            got = [_cells(memory).get((name, dtype, 64, t, False, "fwd")) for t in (1024, 2048, 4096)]
            kib = [c["memory"]["peak_extra_bytes"] / 1024 if c and c.get("memory") else math.nan for c in got]
            fit = f"{math.log(kib[2] / kib[0]) / math.log(4):.2f}" if all(k >= 64 for k in kib) else "- (under 64 KiB)"
            print(f"  {name:12} {dtype:9} " + " ".join(f"{k:8.0f}" for k in kib) + f"   exponent {fit}")


if __name__ == "__main__":
    main()
