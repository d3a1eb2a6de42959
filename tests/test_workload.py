"""``--workload``: vLLM's batch grammar and JSON traces, read into one packed, bottom-right causal case."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.bench.sweeps import plan
from harness.case.workload import parse_workloads, request_kind
from harness.cli import main
from harness.errors import UsageError


@pytest.mark.parametrize(("spec", "requests"), [
    ("q2k", [(2048, 2048)]),
    ("8q1kv1k", [(1, 1024)] * 8),
    ("8q1s1k", [(1, 1024)] * 8),
    ("2q2k_32q1s1k", [(2048, 2048)] * 2 + [(1, 1024)] * 32),
    ("q4kv1k", [(4, 1024)]),
    ("8s1k", [(1, 1024)] * 8),
    ("spec4s1k", [(4, 1024)]),
    ("2chunk512q4k", [(512, 4096)] * 2),
    ("q100s300", [(100, 300)]),
])
def test_vllm_specs_read_as_their_requests(spec: str, requests: list[tuple[int, int]]) -> None:
    (batch,) = parse_workloads([spec])
    assert list(batch.requests) == requests


def test_a_batch_is_one_packed_bottom_right_causal_call() -> None:
    (batch,) = parse_workloads(["2q64_4s200_spec3s90_chunk32q128"])
    case = batch.case(heads=4, d=32)
    assert (case.batch, case.tq, case.tk) == (1, 2 * 64 + 4 + 3 + 32, 2 * 64 + 4 * 200 + 90 + 128)
    assert case.varlen == batch.requests and case.causal and case.causal_align == "bottom_right"
    assert batch.kinds() == {"prefill": 2, "decode": 4, "speculative": 1, "chunked prefill": 1}
    assert [request_kind(q, kv) for q, kv in [(1, 1), (5, 5), (8, 100), (9, 100)]] == [
        "decode", "prefill", "speculative", "chunked prefill"]


def test_a_json_trace_gives_one_batch_per_call(tmp_path: Path) -> None:
    one = tmp_path / "one.json"
    one.write_text(json.dumps({"requests": [{"q": 512, "kv": 4096}, {"q": 1, "kv": 700}, {"q": 64}]}))
    many = tmp_path / "many.json"
    many.write_text(json.dumps({"batches": [{"requests": [{"q": 1, "kv": 9}]}, {"requests": [{"q": 3, "kv": 3}]}]}))
    batches = parse_workloads([str(one), str(many)])
    assert [b.requests for b in batches] == [((512, 4096), (1, 700), (64, 64)), ((1, 9),), ((3, 3),)]


@pytest.mark.parametrize(("spec", "named"), [
    ("2q", "'2q'"), ("q1s1k_x", "'x'"), ("q2ks1k", "kv >= q"), ("0q1s1k", "at least one"), ("q0s5", "query token"), ("5000s1k", "at most"),
    ("q1s1k__q2", "''"),
])
def test_a_bad_spec_is_an_error_that_names_the_segment_and_the_grammar(spec: str, named: str) -> None:
    with pytest.raises(UsageError) as caught:
        parse_workloads([spec])
    assert named in str(caught.value) and spec in str(caught.value)


def test_a_bad_trace_names_the_request(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"requests": [{"q": 4, "kv": 8}, {"q": 9, "kv": 2}]}))
    with pytest.raises(UsageError, match="request 1"):
        parse_workloads([str(bad)])
    bad.write_text("{not json")
    with pytest.raises(UsageError, match="not JSON"):
        parse_workloads([str(bad)])


def test_bench_plans_one_cell_per_batch_and_axis_and_refuses_the_lengths_axes() -> None:
    cells = plan("quick", ["torch_sdpa"], {"workload": ["2q64_4s200", "spec4s128"], "d": [32, 64]})
    assert [(c.case.varlen, c.case.d, c.mode) for c in cells] == [
        (((4, 128),), 32, "fwd"), (((4, 128),), 64, "fwd"), (((64, 64),) * 2 + ((1, 200),) * 4, 32, "fwd"),
        (((64, 64),) * 2 + ((1, 200),) * 4, 64, "fwd")]
    with pytest.raises(UsageError, match="--T"):
        plan("quick", ["torch_sdpa"], {"workload": ["q64"], "T": [128]})


def test_the_commands_say_what_is_wrong_with_a_spec(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["bench", "--workload", "2q2k_x", "--out", str(tmp_path / "b.json")]) == 2
    assert "'x' is not a request" in capsys.readouterr().err
    assert main(["verify", "--workload", "q2ks1k", "--json", str(tmp_path / "v.json")]) == 2
    assert "kv >= q" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_the_report_gives_each_serving_batch_its_tokens_per_second(tmp_path: Path) -> None:
    from harness.report import markdown
    from harness.report.findings import analyse
    from harness.report.load import load
    from harness.results import BenchCell, CellCase, ResultWriter

    path = tmp_path / "run.json"
    writer = ResultWriter(path, "bench", {"suite": "synthetic"})
    for spec, median in (("2q64_4s200", 2e-3), ("8s1k", 1e-3)):
        (batch,) = parse_workloads([spec])
        case = batch.case(heads=2, d=16)
        writer.append(BenchCell(implementation="k", case=CellCase.of(case), case_id=case.id, mode="fwd", status="ok",
                                samples_s=(median,) * 3, stats={"median": median, "iqr_over_median": 0.01},
                                bytes=1e6))
    writer.finish()
    writer.close()
    section = "\n".join(markdown._serving_section(analyse(load([path]), "k")))
    assert "| 2 prefill, 4 decode | 132 / 928 | k | 2 | 66,000 |" in section
    assert "| 8 decode | 8 / 8192 | k | 1 | 8,000 |" in section
