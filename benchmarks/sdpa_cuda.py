"""SDPA's backends on a GPU: TFLOP/s of each (PyTorch's own choice and every pinned backend) against the GPU's
measured GEMM peak, the read bandwidth, and the timer's own cost; one JSON object printed per line.

    PYTHONPATH=. python3 benchmarks/sdpa_cuda.py [--json FILE]        # on a CUDA machine (scripts/gpu_check.sh)
    PYTHONPATH=. python3 benchmarks/sdpa_cuda.py --cpu                # the same logic on tiny CPU shapes

Every figure is attnbench's own measure, the one bench uses (:mod:`harness.bench.timing`: CUDA events around
each call after a device-wide synchronize, the L2 flushed before it): the GEMM peak of the dtype
(:func:`harness.bench.peak.measure_gemm_peak`, an 8192 x 8192 bf16 product on a GPU), the read bandwidth
(:func:`harness.bench.bandwidth.measure_bandwidth`), and the median time of an empty call, which is what the
synchronize inside the bracket adds to every sample. FLOPs are attnbench's count (:mod:`harness.reference.flops`: causal
counts only the attended pairs). A backend PyTorch refuses for a shape is printed with PyTorch's reason.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
import torch.nn.functional as F

from harness.analysis.stats import summarize
from harness.bench.bandwidth import measure_bandwidth
from harness.bench.peak import measure_gemm_peak
from harness.bench.timing import TimingConfig, time_call
from harness.case.attention import AttentionCase
from harness.reference.flops import attention_flops

BACKENDS = (None, "FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION", "MATH")
"""None: PyTorch's own choice."""
GPU_SHAPE = {"batch": 4, "heads": 16, "tq": 4096, "d": 128, "dtype": "bfloat16"}
CPU_SHAPE = {"batch": 1, "heads": 2, "tq": 128, "d": 64, "dtype": "float32"}
TIMING = TimingConfig(warmup_s=0.05, budget_s=0.2, min_samples=5)


def _call(backend: str | None, case: AttentionCase, mode: str) -> Any:
    """The zero-argument call of one backend on the case's inputs (drawn on the device, never zeros)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    gen = torch.Generator(device=case.device).manual_seed(0)
    dtype = getattr(torch, case.dtype)
    q, k, v = (torch.randn(case.batch, case.heads, case.tq, case.d, generator=gen, device=case.device, dtype=dtype)
               .requires_grad_(mode != "fwd") for _ in range(3))
    grad = torch.randn_like(q)

    def call() -> Any:
        with sdpa_kernel(getattr(SDPBackend, backend)) if backend else contextlib.nullcontext():
            out = F.scaled_dot_product_attention(q, k, v, is_causal=case.causal)
            if mode == "fwd":
                return out
            return torch.autograd.grad(out, (q, k, v), grad)

    call()  # PyTorch's refusal, if any, here (outside any timer)
    return call


def measure(device: str, modes: tuple[str, ...]) -> list[dict[str, Any]]:
    shape = GPU_SHAPE if device == "cuda" else CPU_SHAPE
    rows: list[dict[str, Any]] = []
    peak = measure_gemm_peak(shape["dtype"], device)
    stream = measure_bandwidth(device)
    empty = summarize(time_call(lambda: None, device, TIMING))
    rows.append({"what": "machine", "device": device,
                 "name": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
                 "gemm_peak_tflops": (peak.gflops or 0) / 1e3, "gemm_fastest_tflops": (peak.fastest_call_gflops or 0) / 1e3,
                 "gemm_method": peak.method, "read_gbps": stream.read_gbps, "copy_gbps": stream.copy_gbps,
                 "empty_call_us": 1e6 * (empty.median or 0.0), "torch": torch.__version__})
    for causal in (False, True):
        case = AttentionCase(**shape, causal=causal, device=device)  # type: ignore[arg-type]
        for mode in modes:
            for backend in BACKENDS:
                row: dict[str, Any] = {"what": "sdpa", "backend": backend or "default", "causal": causal, "mode": mode,
                                       "shape": f"B{case.batch} H{case.heads} T{case.tq} d{case.d} {case.dtype}"}
                try:
                    stats = summarize(time_call(_call(backend, case, mode), device, TIMING))
                except RuntimeError as exc:
                    row["error"] = str(exc).strip().splitlines()[0][:300]
                    rows.append(row)
                    continue
                tflops = attention_flops(case, mode) / (stats.median or 1.0) / 1e12
                row.update({"median_ms": 1e3 * (stats.median or 0.0), "tflops": tflops,
                            "pct_of_gemm_peak": 100 * tflops * 1e3 / (peak.gflops or float("inf")), "samples": stats.n})
                rows.append(row)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cpu", action="store_true", help="tiny CPU shapes: the script's logic without a GPU")
    parser.add_argument("--json", type=Path, help="also write the rows here (a JSON list)")
    parser.add_argument("--modes", nargs="+", default=["fwd", "fwd+bwd"], choices=("fwd", "fwd+bwd"))
    args = parser.parse_args()
    device = "cpu" if args.cpu else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        print(f"sdpa_cuda: torch {torch.__version__} sees no CUDA device; --cpu runs the logic on the CPU", file=sys.stderr)
        return 2
    torch.set_num_threads(min(torch.get_num_threads(), os.cpu_count() or 1))
    rows = measure(device, tuple(args.modes))
    for row in rows:
        print(json.dumps(row), flush=True)
    if args.json:
        tmp = args.json.with_suffix(".tmp")
        tmp.write_text(json.dumps(rows, indent=1))
        tmp.replace(args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
