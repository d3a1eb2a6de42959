"""The error-growth sweep: which cases it makes, what it measures, and the report's error-vs-T plot."""

from __future__ import annotations

from pathlib import Path

import torch

from harness import register
from harness.case.attention import AttentionCase
from harness.contract.discovery import load_registry
from harness.contract.registry import make_implementation
from harness.report.builder import build_report
from harness.report.settings import ReportSettings
from harness.results import ResultWriter, VerifyCell
from harness.verify.case_checks import check_kernel_case
from harness.verify.growth import check_growth
from harness.verify.suites import GROWTH_QUERIES, GROWTH_T, kernel_cases

REGISTRY = load_registry()


def test_the_sweep_covers_every_declared_dtype_at_each_size_of_the_suite() -> None:
    impl = REGISTRY.get("torch_eager")
    growth = [c for c in kernel_cases(impl, "quick") if c.growth]
    assert sorted({(c.dtype, c.tk) for c in growth}) == sorted((d, t) for d in impl.declared.dtypes for t in GROWTH_T["quick"])
    assert all(c.tq == min(c.tk, GROWTH_QUERIES) for c in growth)  # T keys, at most 256 independent query rows
    assert not [c for c in kernel_cases(impl, "small") if c.growth]  # pytest's small suite stays small
    assert max(GROWTH_T["full"]) == 8192


def test_the_textbook_formula_has_exactly_the_baseline_error_even_at_large_t() -> None:
    impl = REGISTRY.get("torch_eager")
    for t in (64, 4096):  # 4096: the oracle and the baseline are computed in query chunks
        (result,) = check_kernel_case(impl, AttentionCase(heads=1, tq=t, d=64, growth=True), 3)
        assert result["check"] == "error_growth" and result["status"] == "pass", result
        assert result["metrics"]["max_abs_err"] == result["metrics"]["base_err"] > 0
        assert result["metrics"]["T"] == t


def _bf16_weights(q, k, v, *, causal=False, mask=None, scale=None):
    """BROKEN: the softmax weights and the weighted sum in bfloat16 for float32 inputs."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    weights = torch.softmax((q @ k.transpose(-1, -2)) * scale, dim=-1)
    return (weights.bfloat16() @ v.bfloat16()).float()


def test_low_precision_accumulation_fails_the_sweep() -> None:
    impl = make_implementation("bf16_weights", _bf16_weights, backend="torch")
    result = check_growth(impl, AttentionCase(heads=1, tq=1024, d=64, growth=True))
    assert result["status"] == "fail" and result["metrics"]["ratio"] > 10, result


def test_the_report_plots_error_against_t_per_dtype(tmp_path: Path) -> None:
    path = tmp_path / "growth.json"
    writer = ResultWriter(path, "verify", {"suite": "synthetic"})
    for name, slope in (("steady", 0.0), ("drifting", 1.0)):
        for dtype in ("float32", "bfloat16"):
            for t in (64, 256, 1024, 4096):
                case = AttentionCase(heads=1, tq=t, d=64, dtype=dtype, growth=True)
                base = 1e-7 if dtype == "float32" else 1e-3
                writer.append(VerifyCell(implementation=name, case=case.to_dict(), case_id=case.id, check="error_growth",
                                         group="error_growth", status="pass",
                                         metrics={"max_abs_err": base * (t / 64) ** slope, "base_err": base, "T": t,
                                                  "bound": 3 * base}))
    writer.finish()
    report = build_report(ReportSettings((path,), tmp_path / "out"))
    assert len(report.results.growth) == 16
    assert "error_vs_T" in {p.name for p in report.plots} and (tmp_path / "out" / "plots" / "error_vs_T.png").exists()
    (plot,) = [p for p in report.plots if p.name == "error_vs_T"]
    assert "over the verify rule's bound" in plot.caption and plot.texts_outside == ()  # relative to the bound


def test_a_plugin_is_swept_in_its_declared_dtypes(tmp_path: Path) -> None:
    @register("two_dtypes", backend="torch", dtypes=("float32", "float64"))
    def two_dtypes(q, k, v, *, causal=False, mask=None, scale=None):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=scale)

    growth = [c for c in kernel_cases(two_dtypes.__attnbench__, "full") if c.growth]
    assert {c.dtype for c in growth} == {"float32", "float64"} and len(growth) == 2 * len(GROWTH_T["full"])
