"""PyTorch's CPU FlexAttention, compiled, against SDPA in float64, per head dim and key count, on each vector
width inductor can compile for here: which (d, Tk) come back wrong. Pure PyTorch: no attnbench code.

    python3 benchmarks/flex_cpu_isa_check.py            # every ISA the CPU has (a fresh process each)
    python3 benchmarks/flex_cpu_isa_check.py --isa avx2

Each ISA runs in its own process with its own empty inductor cache (``ATEN_CPU_CAPABILITY`` picks the
vector width inductor compiles for), so no kernel compiled earlier decides the answer.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

HEAD_DIMS = (16, 32, 64, 128)
KEY_COUNTS = (1, 7, 8, 9, 16, 24, 40, 56, 120, 136, 200, 256)


def check(head_dims: tuple[int, ...], key_counts: tuple[int, ...]) -> list[tuple[int, int, float]]:
    import torch
    from torch.nn.attention.flex_attention import flex_attention

    compiled = torch.compile(flex_attention, dynamic=True)
    wrong = []
    for d in head_dims:
        for tk in key_counts:
            gen = torch.Generator().manual_seed(tk)
            q, k, v = (torch.randn(1, 2, n, d, generator=gen) for n in (5, tk, tk))
            want = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double())
            err = (compiled(q, k, v).double() - want).abs().max().item()
            if not err < 1e-5:  # NaN included
                wrong.append((d, tk, err))
    return wrong


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--isa", action="append", choices=("avx2", "avx512", "default"),
                        help="vector width(s) to compile for (default: avx2, and avx512 where the CPU has it)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        import torch

        wrong = check(HEAD_DIMS, KEY_COUNTS)
        print(f"torch {torch.__version__}, ATEN_CPU_CAPABILITY={os.environ.get('ATEN_CPU_CAPABILITY', 'default')}: "
              f"{len(wrong)} of {len(HEAD_DIMS) * len(KEY_COUNTS)} (d, Tk) wrong"
              + "".join(f"\n  d={d} Tk={tk}: max error {err:.3g}" for d, tk, err in wrong))
        return
    has_avx512 = "avx512f" in open("/proc/cpuinfo").read() if os.path.exists("/proc/cpuinfo") else False
    for isa in args.isa or (["avx2", "avx512"] if has_avx512 else ["avx2"]):
        with tempfile.TemporaryDirectory() as cache:
            env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache}
            if isa != "default":
                env["ATEN_CPU_CAPABILITY"] = isa
            subprocess.run([sys.executable, __file__, "--child"], env=env, check=True)


if __name__ == "__main__":
    main()
