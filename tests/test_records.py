"""The typed records of a result file: each round-trips through JSON with its unknown keys and explicit
nulls, every readable version (1, 2, 3) reads, and a run read from a file writes the same JSON."""

from __future__ import annotations

import copy
import dataclasses
import gzip
import json
import math
from pathlib import Path
from typing import Any

import pytest

from harness.analysis.stats import summarize
from harness.results import (
    Accounting,
    Bandwidth,
    BenchCell,
    Config,
    Environment,
    Floor,
    Integrity,
    Memory,
    Node,
    Peak,
    PeakKey,
    Record,
    Run,
    Stats,
    read_run,
    write_json_atomic,
)
from harness.results.files import encode_json

DATA = Path(__file__).resolve().parent / "data" / "schema_v1"

STATS = summarize([1e-3, 2e-3, 4e-3])
NODE = Node(hostname="a", cpu_model="Fast CPU", cores=64, torch="2.13.0+cpu", kind="Fast CPU x64 / torch 2.13.0+cpu",
            node_id="n1")
RECORDS: list[Record] = [
    STATS,
    Memory(peak_extra_bytes=1024, output_bytes=2048, method="vmhwm", note="glibc not found"),
    Memory(error="crash: exit -9"),
    NODE,
    Peak(gflops=100.0, fastest_call_gflops=120.0, method="torch.matmul", n=2048, threads=2, samples_s=(0.1, 0.2),
         stats=STATS, node=NODE, first_gflops=90.0, confirmed_gflops=None),
    Peak(error="timeout: 300 s"),
    Bandwidth(read_gbps=40.0, copy_gbps=30.0, method="torch.sum", bytes=2**28, threads=2, read_stats=STATS,
              copy_stats=STATS, first_read_gbps=39.0, confirmed_read_gbps=40.0),
    Bandwidth(error="crash"),
    Environment(attnbench="0.1", cpu_model="Fast CPU", cores=2, threads=1),
    Config(suite="quick", only=("tiled",), plugins=(), threads=2, extra={"timing": {"budget_s": 0.5}}),
    Integrity(input_sets=2, shifted=True, untyped=(), kept_problems=("x",), output_problems=(),
              checked=({"sample": 1, "rows": "all rows"},), cpu_after_s=(0.001,), spin_s=0.002,
              accounting=Accounting(total_s=1.0, loop_s=0.5, captures_s=0.0, phases_s=1.0, checks_s=0.1),
              floor=Floor(floor_s=1e-6, compute_roof_gflops=600.0, memory_roof_gbps=1000.0, compute_s=1e-6,
                          memory_s=1e-7, how="roofs"), wall_s=1.1),
]


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: type(r).__name__)
def test_each_record_round_trips_through_json(record: Record) -> None:
    stored = json.loads(json.dumps(record.to_json()))
    again = type(record).from_json(stored)
    assert again == record and again.to_json() == record.to_json()
    assert list(again.to_json()) == list(record.to_json())  # the same keys, in the same order
    assert dict(again) == stored  # a record reads as its stored form, too


def test_writers_store_explicit_nulls_only_where_they_always_did() -> None:
    assert Memory(error="x").to_json() == {"peak_extra_bytes": None, "method": None, "error": "x"}
    assert Peak(error="x").to_json() == {"gflops": None, "error": "x"}
    assert Bandwidth(error="x").to_json() == {"read_gbps": None, "error": "x"}
    assert Peak(gflops=1.0, first_gflops=1.0).to_json() == {"gflops": 1.0, "first_gflops": 1.0, "confirmed_gflops": None}
    assert Node(hostname="h").to_json() == {"hostname": "h", "gpu": None, "cuda": None}
    assert Integrity(input_sets=1).to_json() == {"input_sets": 1, "clock": None}
    assert list(STATS.to_json()) == ["median", "iqr", "min", "mean", "stdev", "iqr_over_median", "n"]


def test_unknown_keys_and_nulls_of_other_versions_are_kept_in_place() -> None:
    stored = {"colour": "red", "gflops": 3.0, "confirmed_gflops": None, "stats": {"median": 1.0, "p99": 2.0},
              "node": {"kind": "k", "rack": 7}}
    peak = Peak.from_json(stored)
    assert peak.gflops == 3.0 and peak.extra == {"colour": "red"}
    assert isinstance(peak.stats, Stats) and peak.stats.median == 1.0 and peak.stats.extra == {"p99": 2.0}
    assert isinstance(peak.node, Node) and peak.node.kind == "k"
    assert encode_json(peak.to_json()) == encode_json(stored)  # byte for byte: order, nulls, unknown keys
    assert Node.from_json({"kind": "k"}).to_json() == {"kind": "k"}  # no null invented for a key it lacked


def test_a_record_that_is_not_an_object_is_a_named_error(tmp_path: Path) -> None:
    from harness.errors import UsageError

    document = _v3_document()
    document["peaks"]["float32/cpu@k"] = [1, 2]
    path = tmp_path / "damaged.json"
    write_json_atomic(path, document)
    with pytest.raises(UsageError, match=r"damaged result file: "
                       r"peaks\['float32/cpu@k'\]: \[1, 2\] is an array, not an object$"):
        read_run(path)


def test_records_are_frozen_and_changed_by_replacing() -> None:
    peak = Peak(gflops=1.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        peak.gflops = 2.0  # type: ignore[misc]
    higher = dataclasses.replace(peak, gflops=2.0)
    assert peak.gflops == 1.0 and higher.gflops == 2.0
    both = Bandwidth(read_gbps=10.0, copy_gbps=5.0).higher(Bandwidth(read_gbps=12.0, copy_gbps=4.0), confirm=True)
    assert (both.read_gbps, both.copy_gbps, both.first_read_gbps, both.confirmed_copy_gbps) == (12.0, 5.0, 10.0, 4.0)


def _v3_document() -> dict[str, Any]:
    """A version-3 document with every record, an unknown key in each and the nulls writers store."""
    cell = BenchCell(implementation="x", case={"heads": 2, "tq": 16, "d": 8}, case_id="c", mode="fwd", status="ok",
                     flops=1e6, peak_key="float32/cpu@k", samples_s=(1e-3, 2e-3, 4e-3), stats=STATS, gflops=1.0,
                     memory=Memory(peak_extra_bytes=1, output_bytes=2, method="vmhwm"), threads=1, node=NODE,
                     started_at=1.0, ended_at=2.0, integrity=RECORDS[-1], profile=(("aten::mm", 0.9),))
    run = Run(run_id="r", command="bench", complete=True, environment=RECORDS[8], config=RECORDS[9], cells=(cell,),
              peaks={"float32/cpu@k": RECORDS[4], "float64/cpu@k": RECORDS[5]}, bandwidth={"cpu/threads=1@k": RECORDS[6]})
    document = json.loads(json.dumps(run.to_json()))
    document["environment"]["shell"] = "bash"
    document["peaks"]["float32/cpu@k"]["stats"]["p99"] = 0.4
    document["cells"][0]["memory"]["allocator"] = "glibc"
    document["cells"][0]["node"]["rack"] = 3
    return document


def test_a_v3_document_reads_and_writes_back_byte_for_byte() -> None:
    document = _v3_document()
    run = Run.from_json(document)
    cell = run.bench_cells()[0]
    assert isinstance(cell.stats, Stats) and isinstance(cell.memory, Memory) and isinstance(cell.node, Node)
    assert cell.memory.extra == {"allocator": "glibc"} and run.environment.extra == {"shell": "bash"}
    assert run.pct_peak(cell) == pytest.approx(1.0) and run.read_bandwidth(cell) is None  # threads=1: keyed by kind
    assert encode_json(run.to_json()) == encode_json(document)


def test_v1_and_v2_files_read_and_write_the_same_records(tmp_path: Path) -> None:
    v1 = json.loads((DATA / "main-job-bench.json").read_text())
    run = read_run(DATA / "main-job-bench.json")
    assert all(isinstance(p, Peak) for p in run.peaks.values()) and isinstance(run.config, Config)
    written = run.to_json()
    for key in ("environment", "config", "peaks", "implementations"):
        assert encode_json(written[key]) == encode_json(v1[key])  # every record as the v1 file stored it
    assert v1["fits"] and "fits" not in written  # a legacy key, read past: fits are derived when a file is read
    for stored, cell in zip(v1["cells"], written["cells"]):
        for key in ("stats", "memory", "samples_s"):
            assert encode_json(cell.get(key)) == encode_json(stored.get(key))
    verify = json.loads(gzip.decompress((DATA / "main-job-verify.json.gz").read_bytes()))
    assert Run.from_json(verify).to_json()["cells"] == verify["cells"]
    v2 = copy.deepcopy(_v3_document())
    v2["schema_version"] = 2
    for stored in v2["cells"]:
        for key in ("node", "started_at", "ended_at"):
            stored.pop(key)
    path = tmp_path / "v2.json"
    write_json_atomic(path, v2)
    again = read_run(path).to_json()
    assert {**again, "schema_version": 2} == v2


def test_a_bench_run_read_back_writes_its_own_file_again(tmp_path: Path) -> None:
    from harness.cli import main

    path = tmp_path / "run.json"
    assert main(["bench", "--T", "64", "--heads", "1", "--d", "16", "--mode", "fwd", "--only", "numpy_naive",
                 "--out", str(path), "--roof-budget", "0.01", "--budget", "0.02", "--min-samples", "3", "--threads", "1", "--quiet"]) == 0
    run = read_run(path)
    assert encode_json(run.to_json()) == path.read_text()
    cell = run.bench_cells()[0]
    assert isinstance(cell.integrity, Integrity) and isinstance(cell.integrity.floor, Floor)
    peak = run.peaks[PeakKey("float32", "cpu")]
    assert peak.gflops == max(peak.first_gflops or 0.0, peak.confirmed_gflops or 0.0)
    assert cell.stats is not None and math.isclose(cell.gflops or 0.0, (cell.flops or 0.0) / (cell.stats.median or 1.0) / 1e9)
