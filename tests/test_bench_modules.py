"""`bench` times module implementations: the plan's calls as whole layers, FLOPs of projections and attention."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.bench.model_sweeps import model_plan
from harness.bench.module_cells import module_case_for, module_cells
from harness.bench.sweeps import plan
from harness.case.attention import AttentionCase
from harness.case.decode import decode_fields
from harness.cli import main
from harness.contract.discovery import load_registry
from harness.modules.cases import ModuleCase
from harness.reference.flops import attention_flops, compulsory_bytes, work_g
from harness.results import CellCase


def test_kernel_calls_map_to_the_layers_that_make_them() -> None:
    prefill = module_case_for(AttentionCase(batch=2, heads=8, kv_heads=2, tq=100, d=64, causal=True), "mha")
    assert prefill == ModuleCase(batch=2, seq=100, d_model=512, heads=8, kv_heads=2, causal=True)
    decode = module_case_for(AttentionCase(**decode_fields(4, 32, 8, 4096, d=128, ragged=True)), "mha")
    assert decode is not None and (decode.seq, decode.past, decode.kv_heads, decode.causal) == (1, 4095, 8, True)
    chunk = module_case_for(AttentionCase(**decode_fields(2, 8, 2, 512, tq=4, d=64)), "mha")
    assert chunk is not None and (chunk.seq, chunk.past) == (4, 508)
    assert module_case_for(AttentionCase(heads=2, tq=64, d=32, causal=True, window=(7, 0)), "mha") is None
    assert module_case_for(AttentionCase(heads=2, tq=64, d=32, mask="random"), "mha") is None
    assert module_case_for(AttentionCase(heads=2, tq=32, tk=64, d=32, causal=True), "mha") is None  # top-left chunk
    assert module_case_for(AttentionCase(heads=4, kv_heads=2, tq=64, d=32), "encoder") is None
    assert module_case_for(AttentionCase(heads=4, tq=64, d=32), "encoder") == ModuleCase(
        layer="encoder", batch=1, seq=64, d_model=128, heads=4)


def test_module_flops_count_projections_attention_and_feed_forward() -> None:
    case = ModuleCase(batch=2, seq=10, d_model=32, heads=4, kv_heads=2, causal=True, past=6)
    projections = 2 * 20 * 32 * (2 * 32 + 2 * 16)
    pairs = 10 * 6 + 10 * 11 // 2  # every cached key, and the new ones bottom-right causal
    assert attention_flops(case, "fwd") == projections + 4 * 2 * 4 * pairs * 8
    encoder = ModuleCase(layer="encoder", batch=1, seq=10, d_model=32, heads=4, dim_ff=48)
    assert attention_flops(encoder) == 2 * 10 * 32 * 128 + 4 * 4 * 100 * 8 + 4 * 10 * 32 * 48
    assert compulsory_bytes(case) == 4 * (2 * 20 * 32 + 32 * 96 + 2 * 2 * 2 * 6 * 8)
    assert work_g(case) == 2 * 4 * 10 * 16 * 8
    with pytest.raises(ValueError, match="forward only"):
        attention_flops(case, "fwd+bwd")
    stored = CellCase.from_json(case.to_dict())  # a stored module case reads back as the ModuleCase it was
    assert stored.typed == case and isinstance(CellCase.from_json(AttentionCase().to_dict()).typed, AttentionCase)


def test_plans_give_modules_their_layers_and_kernels_their_calls() -> None:
    registry = load_registry([])
    impls = {name: registry.get(name) for name in ("torch_mha", "nn_encoder", "torch_sdpa")}
    cells = module_cells(plan("quick", list(impls), {"T": [64, 128], "mode": ["fwd", "fwd+bwd"]}), impls)
    by_impl: dict[str, set[str]] = {}
    for cell in cells:
        by_impl.setdefault(cell.implementation, set()).add(f"{cell.case.id} {cell.mode}")
    assert by_impl["torch_mha"] == {"module-mha-B1-T64-D512-H8-float32 fwd", "module-mha-B1-T128-D512-H8-float32 fwd"}
    assert by_impl["nn_encoder"] == {"module-postln-B1-T64-D512-H8-F1024-float32 fwd",
                                     "module-postln-B1-T128-D512-H8-F1024-float32 fwd"}
    assert len(by_impl["torch_sdpa"]) == 4  # kernels keep fwd and fwd+bwd
    model = module_cells(model_plan("llama-3.1-8b", ["torch_mha"], {"T": [512], "batch": [2]}), impls)
    assert [c.case.id for c in model] == ["module-mha-B2-T1-D4096-H32/8-float32-causal-past=511",
                                          "module-mha-B1-T512-D4096-H32/8-float32-causal"]


@pytest.mark.slow
def test_bench_times_a_module_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "modules.json"
    assert main(["bench", "--only", "torch_mha,numpy_mha", "--T", "32", "64", "128", "--heads", "2", "--d", "16",
                 "--roof-budget", "0.01", "--budget", "0.02", "--min-samples", "3", "--threads", "1", "--quiet", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    cells = [c for c in data["cells"] if c["status"] == "ok"]
    assert {c["implementation"] for c in cells} == {"torch_mha", "numpy_mha"} and len(cells) == 6
    for cell in cells:
        case = ModuleCase.from_dict(cell["case"])
        assert cell["case_id"] == case.id and cell["flops"] == attention_flops(case)
        assert cell["gflops"] > 0 and cell["memory"]["peak_extra_bytes"] is not None
    assert "fits" not in data  # fits are derived when the file is read, never stored
