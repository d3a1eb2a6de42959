"""Hand-built but realistic result files for the report and compare tests (no timing involved).

The numbers follow the costs the built-ins really have on this kind of machine:
time ~ B·H·T²·d for all; peak extra memory ~ T² (three 4-byte T x T matrices) for
numpy_naive and torch_eager, ~ T for tiled and torch_sdpa (blocks and row statistics),
plus a fixed overhead that the fit should leave out at small T.
"""

from __future__ import annotations

import random
from pathlib import Path

from harness.analysis.stats import summarize
from harness.case.attention import AttentionCase
from harness.results import BenchCell, ResultWriter, VerifyCell
from harness.results.schema import cell_from_json

SPEED = {"numpy_naive": 2.0e-10, "torch_eager": 1.0e-10, "tiled": 1.5e-10, "torch_sdpa": 0.4e-10}
"""Seconds per unit of H·T²·d (at B=1)."""
MATERIALISING = {"numpy_naive", "torch_eager"}
OVERHEAD_S = 20e-6
GROUPS = ("basic", "causal", "mask", "gqa", "dtypes")


def bench_cases() -> list[AttentionCase]:
    """A T sweep (d=64, H=8), a d sweep (T=512, H=8) and a heads sweep (T=512, d=64)."""
    cases = [AttentionCase(heads=8, tq=t, d=64) for t in (128, 256, 512, 1024, 2048)]
    cases += [AttentionCase(heads=8, tq=512, d=d) for d in (32, 128)]
    cases += [AttentionCase(heads=h, tq=512, d=64) for h in (1, 2, 4, 16)]
    return cases


def memory_bytes(name: str, case: AttentionCase) -> int:
    t, h, d = case.tq, case.heads, case.d
    if name in MATERIALISING:
        return 3 * 4 * h * t * t + 4096  # scores, exp(scores - max), weights: three T x T float32
    return 3 * 4 * h * t * d + 4 * h * t * 2 + 128 * 1024


def bench_cell(name: str, case: AttentionCase, rng: random.Random, slow: float = 1.0, n: int = 15) -> BenchCell:
    median = (SPEED[name] * case.batch * case.heads * case.tq * case.tk * case.d + OVERHEAD_S) * slow
    samples = [median * (1 + rng.gauss(0, 0.02)) for _ in range(n)]
    flops = 4 * case.batch * case.heads * case.tq * case.tk * case.d
    stats = summarize(samples)
    return BenchCell(implementation=name, case=case.to_dict(), case_id=case.id, mode="fwd", status="ok",
                     samples_s=tuple(samples), stats=stats, flops=flops, gflops=flops / stats["median"] / 1e9,
                     peak_key="float32/cpu", threads=2,
                     memory={"peak_extra_bytes": memory_bytes(name, case), "method": "synthetic",
                             "output_bytes": 4 * case.batch * case.heads * case.tq * case.d})  # as bench records it


def write_bench_run(path: Path, *, seed: int = 0, slow: dict[str, float] | None = None,
                    names: tuple[str, ...] = tuple(SPEED)) -> Path:
    """A complete bench result file; ``slow`` multiplies the named implementations' times."""
    rng = random.Random(seed)
    writer = ResultWriter(path, "bench", {"suite": "synthetic"})
    writer.set("peaks", {"float32/cpu": {"gflops": 175.0}})
    writer.set("implementations", {name: {"memory": "quadratic" if name in MATERIALISING else "linear"}
                                   for name in names})
    for name in names:
        for case in bench_cases():
            writer.append(bench_cell(name, case, rng, (slow or {}).get(name, 1.0)))
    writer.append(cell_from_json({"type": "bench", "implementation": "xformers_memeff",
                                  "case": bench_cases()[0].to_dict(), "case_id": bench_cases()[0].id, "mode": "fwd",
                                  "status": "skipped", "reason": "xformers has no CPU kernels", "threads": 2}))
    writer.finish()
    return path


def verify_cell(name: str, group: str, case: AttentionCase, status: str, ratio: float | None,
                reason: str | None = None) -> VerifyCell:
    metrics = {} if ratio is None else {"max_abs_err": 1e-6 * ratio, "rel_l2": 1e-7, "base_err": 1e-6, "ratio": ratio,
                                        "bound": 2e-6, "m": 2, "floor": 1e-6, "worst_index": [0, 0, 0, 0], "trials": 3}
    return VerifyCell(implementation=name, case=case.to_dict(), case_id=case.id, group=group, check="output",
                      status=status, reason=reason, metrics=metrics, seconds=0.01)


def write_verify_run(path: Path, *, broken: str | None = None) -> Path:
    """A verify result file: every built-in passes, xformers skips, ``broken`` (if given) fails on causal."""
    writer = ResultWriter(path, "verify", {"suite": "synthetic"})
    for name in (*SPEED, *([broken] if broken else [])):
        for i, group in enumerate(GROUPS):
            for t in (17, 128):
                case = AttentionCase(heads=2, tq=t, d=32, causal=group == "causal",
                                     mask="random" if group == "mask" else "none",
                                     kv_heads=1 if group == "gqa" else 0,
                                     dtype="float64" if group == "dtypes" else "float32")
                bad = name == broken and group == "causal"
                writer.append(verify_cell(name, group, case, "fail" if bad else "pass",
                                                41.5 if bad else 0.3 + 0.1 * i))
    for group in GROUPS:
        case = AttentionCase(heads=2, tq=17, d=32)
        writer.append(verify_cell("xformers_memeff", group, case, "skipped", None,
                                        "needs a CUDA device; torch.cuda.is_available() is False here"))
    writer.finish()
    return path


def test_synthetic_runs_are_valid_result_files(tmp_path: Path) -> None:
    from harness.results import load_results

    data = load_results(write_bench_run(tmp_path / "b.json"))
    assert data["complete"] and len(data["cells"]) == len(SPEED) * len(bench_cases()) + 1
    assert load_results(write_verify_run(tmp_path / "v.json", broken="bad<impl>"))["command"] == "verify"
