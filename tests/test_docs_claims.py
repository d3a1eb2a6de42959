"""The claims pipeline without running a benchmark: the table writer on small synthetic claims files, and
the plan of which targets scripts run with which tiers. docs/performance.md is written only by it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from benchmarks.claims import DATA, ROOT, load, machine_tag, machine_tiers, main, plan, render, table
from benchmarks.claims_record import FORMAT

MACHINE = {"cpu": "Example CPU 9000", "isa": "avx2", "cpu_flags": ["avx2", "fma"], "threads": 4,
           "torch": "2.13.0+cpu", "aten_capability": "AVX2", "load_before": [0.5, 0.25, 0.1],
           "load_after": [1.5, 0.75, 0.3], "date": "2026-01-02T03:04:05+00:00"}


def _doc(title: str, rows: list[dict[str, object]]) -> dict[str, object]:
    return {"format": FORMAT, "title": title, "command": "python3 benchmarks/x_targets.py --json x.json",
            "machine": MACHINE, "rows": rows}


ROWS = [
    {"claim": "float32 fwd d=64", "value": 1.234, "unit": "x", "target": ">= 1.15", "met": True,
     "detail": "sdpa 10.0 ms, ours 8.1 ms", "tier": "avx2"},
    {"claim": "bfloat16 fwd+bwd d=128 causal", "value": 0.9, "unit": "x", "target": ">= 1.10", "met": False,
     "detail": "a|b", "tier": "avx2"},
    {"claim": "share of the read bandwidth", "value": 81.6, "unit": "%", "target": ">= 70%", "met": None,
     "detail": "", "tier": "avx2"},
]


def test_a_table_names_its_machine_and_every_figure() -> None:
    text = table(_doc("tiled_fused against torch_sdpa", ROWS))
    lines = text.splitlines()
    assert lines[0] == "## tiled_fused against torch_sdpa: avx2, Example CPU 9000"  # the tier and the CPU in the heading
    machine = lines[2]
    for part in ("Example CPU 9000", "avx2, fma", "ISA tier: avx2", "4 threads", "torch 2.13.0+cpu",
                 "load average 0.50, 0.25, 0.10 before, 1.50, 0.75, 0.30 after", "2026-01-02T03:04:05+00:00"):
        assert part in machine, part
    assert "`python3 benchmarks/x_targets.py --json x.json`" in text
    body = [line for line in lines if line.startswith("| ") and "claim" not in line]
    assert body == [
        "| float32 fwd d=64 | avx2 | 1.23x | >= 1.15 | yes | sdpa 10.0 ms, ours 8.1 ms |",
        "| bfloat16 fwd+bwd d=128 causal | avx2 | 0.90x | >= 1.10 | **no** | a\\|b |",  # a | in a cell is escaped
        "| share of the read bandwidth | avx2 | 82% | >= 70% | - |  |",
    ]


def test_the_tier_column_appears_only_when_rows_name_a_tier() -> None:
    rows = [{**r, "tier": ""} for r in ROWS]
    assert "| claim | measured | target | met | detail |" in table(_doc("t", rows))
    assert "| claim | tier | measured | target | met | detail |" in table(_doc("t", ROWS))


def test_a_file_of_another_format_is_refused() -> None:
    with pytest.raises(ValueError, match="not a claims file"):
        table({"format": "something-else", "title": "t", "machine": MACHINE, "rows": []})


def test_from_json_writes_the_page_with_one_section_per_file(tmp_path: Path) -> None:
    files = []
    for i, title in enumerate(("first", "second")):
        files.append(tmp_path / f"{i}.json")
        files[-1].write_text(json.dumps(_doc(title, ROWS[:1])))
    out = tmp_path / "performance.md"
    assert main(["--from-json", *map(str, files), "--out", str(out)]) == 0
    page = out.read_text()
    assert page.startswith("# Performance\n") and "python3 -m benchmarks.claims" in page
    assert page.index("## first: avx2") < page.index("## second: avx2")
    assert page == render([_doc("first", ROWS[:1]), _doc("second", ROWS[:1])])


def test_tiers_and_plan() -> None:
    assert machine_tiers(["avx2", "fma"]) == ["avx2"]
    assert machine_tiers(["avx2", "fma", "avx512f", "avx512_bf16"]) == ["avx2", "avx512f", "avx512_bf16"]
    assert machine_tiers(["sse4_2"]) == []
    runs = plan(["tiled_fused", "structured"], ["avx2", "avx512f"], Path("j"), rounds=2)
    tag = machine_tag()  # this CPU in each file's name: another machine's files stay beside them
    assert [out.name for _, out in runs] == [f"tiled_fused-avx2{tag}.json", f"tiled_fused-avx512f{tag}.json",
                                             f"structured{tag}.json"]
    for command, out in runs:
        assert command[0] == sys.executable and command[-2:] == ["--claims", str(out)]
        assert command[command.index("--rounds") + 1] == "2"
    assert "--isa=avx512f" in runs[1][0]


def test_performance_page_is_what_its_claims_files_render_to() -> None:
    """docs/performance.md holds no hand-typed figure: it equals the rendering of the claims files beside it
    (regenerate both with ``python3 -m benchmarks.claims``; tables only: ``--from-json docs/claims/*.json``)."""
    files = sorted(DATA.glob("*.json"))
    assert files, f"no claims files in {DATA}"
    assert (ROOT / "docs" / "performance.md").read_text() == render(load(files))


def test_each_machine_keeps_its_own_table_headed_by_its_cpu() -> None:
    zen4 = {**MACHINE, "cpu": "AMD EPYC", "cpu_family": 25, "cpu_model_number": 17, "date": "2026-01-01T00:00:00+00:00"}
    zen5 = {**MACHINE, "cpu": "AMD EPYC", "cpu_family": 26, "cpu_model_number": 2}
    page = render([{**_doc("decode", ROWS[:1]), "machine": m} for m in (zen4, zen5)])
    assert page.index("## decode: avx2, AMD EPYC (family 25, model 17)") < page.index(
        "## decode: avx2, AMD EPYC (family 26, model 2)")
    assert "CPU: AMD EPYC (family 25, model 17; avx2, fma)" in page


def test_a_target_a_measured_roof_rules_out_says_so_instead_of_no() -> None:
    row = {"claim": "bf16 cache: share of the read bandwidth", "value": 52.0, "unit": "%", "target": ">= 70%",
           "met": False, "detail": "", "tier": "avx512", "reachable": 58.4}
    line = [x for x in table(_doc("decode", [row])).splitlines() if x.startswith("| bf16")][0]
    assert "| out of reach here: a measured roof allows 58% |" in line and "**no**" not in line
    missed = {**row, "reachable": None}
    assert "| **no** |" in table(_doc("decode", [missed]))



def test_decode_targets_say_when_the_measured_roof_rules_a_target_out() -> None:
    from benchmarks.decode_targets import reachability

    # Zen 4-like: bf16 in cache 40 GB/s against a 75 GB/s probe: at most 53% reachable, 70% targeted
    reachable, verdict = reachability(share=45.0, target=70, in_cache=40.0, probe=75.0)
    assert reachable is not None and abs(reachable - 53.3) < 0.1
    assert verdict.startswith("out of reach on this CPU") and "53% < 70%" in verdict and "84% of that" in verdict
    assert reachability(80.0, 75, 66.0, 47.0) == (100.0, "met")  # in cache faster than the memory: capped at 100%
    assert reachability(60.0, 75, 90.0, 47.0) == (100.0, "missed")  # the roof allows it: a plain miss
    assert reachability(60.0, 75, 0.0, 47.0) == (None, "missed (in-cache roof not measured)")
