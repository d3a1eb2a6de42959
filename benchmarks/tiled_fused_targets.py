"""Issue 15's targets for ``tiled_fused`` against ``torch_sdpa``, measured by ``attnbench bench``.

    PYTHONPATH=. python3 benchmarks/tiled_fused_targets.py [--out-dir results] [--bf16-peak 820]

Runs two ``attnbench bench`` invocations (each cell in its own worker process, as usual):
B1-H8-T4096 at d = 64 and 128, float32 and bfloat16, causal on and off, fwd and fwd+bwd; then a
forward-only memory sweep over T = 1024, 2048, 4096. Prints every ratio (torch_sdpa's median time
over tiled_fused's, within one run: timings on a shared machine are noisy, absolute times are not
comparable across runs), the bf16 forward's fraction of the bf16 GEMM peak (the peak the run measured,
and the one given by --bf16-peak), and the exponent of the forward's peak extra memory in T.
Nothing here asserts anything: these are targets to report, not tests.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

from harness.cli import main as attnbench

TARGETS = [  # (dtype, mode, causal, the target ratio torch_sdpa time / tiled_fused time)
    ("bfloat16", "fwd", False, 2.0), ("bfloat16", "fwd", True, 2.0),
    ("float32", "fwd", False, 1.1), ("float32", "fwd", True, 1.2),
    ("float32", "fwd+bwd", False, 1.05), ("float32", "fwd+bwd", True, 1.05),
    ("bfloat16", "fwd+bwd", False, 1.5), ("bfloat16", "fwd+bwd", True, 1.5),
]


def _bench(out: Path, *args: str) -> dict:
    argv = ["bench", "--only", "tiled_fused,torch_sdpa", "--heads", "8", "--batch", "1", "--out", str(out),
            "--force", "--quiet", *args]
    print("attnbench " + " ".join(argv), flush=True)
    attnbench(argv)
    return json.loads(out.read_text())


def _cells(doc: dict) -> dict[tuple, dict]:
    return {(c["implementation"], c["case"]["dtype"], c["case"]["d"], c["case"]["tq"], c["case"]["causal"],
             c["mode"]): c for c in doc["cells"] if c.get("status") == "ok"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out-dir", type=Path, default=Path("results"))
    parser.add_argument("--bf16-peak", type=float, default=820.0, help="bf16 GEMM peak, GFLOP/s (issue: ~820)")
    args = parser.parse_args()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    speed = _bench(args.out_dir / f"{stamp}-targets.json", "--T", "4096", "--d", "64", "128", "--dtype", "float32",
                   "bfloat16", "--causal", "both", "--mode", "fwd", "fwd+bwd", "--cell-budget", "600")
    cells, peak = _cells(speed), speed["peaks"].get("bfloat16/cpu", {})
    print(f"\nB1-H8-T4096; bf16 GEMM peak measured in this run: median {peak.get('gflops', math.nan):.0f}, "
          f"fastest call {peak.get('fastest_call_gflops', math.nan):.0f} GFLOP/s; given: {args.bf16_peak:.0f}")
    print(f"{'d':>4} {'dtype':9} {'mode':8} {'causal':6} {'sdpa ms':>9} {'ours ms':>9} {'ratio':>6} {'target':>6}"
          f" {'GFLOP/s':>8}  % of peak (given, measured)")
    for d in (64, 128):
        for dtype, mode, causal, target in TARGETS:
            ours = cells.get(("tiled_fused", dtype, d, 4096, causal, mode))
            sdpa = cells.get(("torch_sdpa", dtype, d, 4096, causal, mode))
            if ours is None or sdpa is None:
                print(f"{d:>4} {dtype:9} {mode:8} {causal!s:6} (a cell did not run)")
                continue
            t_ours, t_sdpa = ours["stats"]["median"], sdpa["stats"]["median"]
            ratio, gflops = t_sdpa / t_ours, ours["gflops"]
            share = ""
            if dtype == "bfloat16" and mode == "fwd":
                share = f"  {100 * gflops / args.bf16_peak:.0f}%, {100 * gflops / peak.get('gflops', math.nan):.0f}%"
            print(f"{d:>4} {dtype:9} {mode:8} {causal!s:6} {1e3 * t_sdpa:9.1f} {1e3 * t_ours:9.1f} {ratio:6.2f}"
                  f" {target:6.2f} {gflops:8.0f}{share}" + ("" if ratio >= target else "  (missed)"))
    memory = _bench(args.out_dir / f"{stamp}-targets-memory.json", "--T", "1024", "2048", "4096", "--d", "64",
                    "--dtype", "float32", "bfloat16", "--causal", "off", "--mode", "fwd", "--budget", "0.2",
                    "--min-samples", "2")
    print("\nforward peak extra memory (MiB) at T = 1024, 2048, 4096, and its exponent in T:")
    for name in ("tiled_fused", "torch_sdpa"):
        for dtype in ("float32", "bfloat16"):
            got = [_cells(memory).get((name, dtype, 64, t, False, "fwd")) for t in (1024, 2048, 4096)]
            mib = [c["memory"]["peak_extra_bytes"] / 2**20 if c and c.get("memory") else math.nan for c in got]
            slope = math.log(mib[2] / mib[0]) / math.log(4) if all(m > 0 for m in mib) else math.nan
            print(f"  {name:12} {dtype:9} " + " ".join(f"{m:7.1f}" for m in mib) + f"   exponent {slope:.2f}")


if __name__ == "__main__":
    main()
