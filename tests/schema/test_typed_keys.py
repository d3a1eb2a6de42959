"""Typed keys and cases in result files: a run's peaks and bandwidth are keyed by :class:`PeakKey` and
:class:`BandwidthKey`, a bench cell names its peak by a ``PeakKey`` and holds its case as a :class:`CellCase`;
they round-trip through a written file, files written before (string keys) read into the same typed keys,
and a key that is no key is a named error. Nothing outside :mod:`harness.results.keys` reads a key's text."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.case.attention import AttentionCase
from harness.errors import UsageError
from harness.modules.cases import ModuleCase
from harness.results import (
    BandwidthKey,
    BenchCell,
    CellCase,
    Node,
    PeakKey,
    Run,
    VerifyCell,
    read_run,
    write_json_atomic,
)
from harness.results.files import encode_json

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "schema_v1"
CASE = AttentionCase(heads=2, tq=16, d=8, window=(4, 0), causal=True)


def _cell(case: AttentionCase | ModuleCase = CASE, kind: str | None = "EPYC x2", threads: int | None = 2) -> BenchCell:
    return BenchCell(implementation="x", case=case, case_id=case.id, mode="fwd", status="ok", flops=4e6,
                     peak_key=PeakKey(case.dtype, case.device, kind), samples_s=(1e-3, 2e-3, 3e-3),
                     stats={"median": 2e-3}, gflops=2.0, bytes=1e6, threads=threads,
                     node=None if kind is None else Node(kind=kind))


def _run(*cells: BenchCell) -> Run:
    return Run(run_id="r", command="bench", complete=True, environment={}, config={}, cells=cells,
               peaks={PeakKey("float32", "cpu"): {"gflops": 10.0}, PeakKey("float32", "cpu", "EPYC x2"): {"gflops": 8.0},
                      PeakKey("float64", "cpu", ""): {"gflops": 4.0}},
               bandwidth={BandwidthKey("cpu", 2, "EPYC x2"): {"read_gbps": 40.0}, BandwidthKey("cpu", None): {"read_gbps": 9.0}})


def test_typed_keys_round_trip_through_a_written_file(tmp_path: Path) -> None:
    run = _run(_cell(), _cell(kind=None, threads=None))
    path = tmp_path / "run.json"
    write_json_atomic(path, run.to_json())
    stored = json.loads(path.read_text())
    assert sorted(stored["peaks"]) == ["float32/cpu", "float32/cpu@EPYC x2", "float64/cpu@"]  # the stored text
    assert sorted(stored["bandwidth"]) == ["cpu/threads=2@EPYC x2", "cpu/threads=default"]
    assert [c["peak_key"] for c in stored["cells"]] == ["float32/cpu@EPYC x2", "float32/cpu"]
    read = read_run(path)
    assert read.peaks == run.peaks and read.bandwidth == run.bandwidth
    assert all(isinstance(k, PeakKey) for k in read.peaks) and all(isinstance(k, BandwidthKey) for k in read.bandwidth or {})
    on_node, local = read.bench_cells()
    assert on_node.peak_key == PeakKey("float32", "cpu", "EPYC x2") and local.peak_key == PeakKey("float32", "cpu")
    # each cell divides by its own kind's roofs, found by the typed keys
    assert read.pct_peak(on_node) == 25.0 and read.pct_peak(local) == 20.0
    assert read.read_bandwidth(on_node) == 40.0 and read.read_bandwidth(local) == 9.0
    assert encode_json(read.to_json()) == path.read_text()  # and writes the same file again


def test_a_cells_case_is_typed_and_its_stored_form_kept(tmp_path: Path) -> None:
    module = ModuleCase(heads=4, seq=8, d_model=32, layer="encoder")
    path = tmp_path / "run.json"
    write_json_atomic(path, _run(_cell(), _cell(module)).to_json())
    kernel, layer = read_run(path).bench_cells()
    assert isinstance(kernel.case, CellCase) and kernel.case.typed == CASE and kernel.attention_case == CASE
    assert kernel.case.window == (4, 0) and kernel.case.causal is True and kernel.case.dtype == "float32"
    assert layer.case.typed == module and layer.case.is_module and layer.attention_case is None
    assert json.loads(path.read_text())["cells"][0]["case"] == json.loads(json.dumps(CASE.to_dict()))  # the case's own
    written = CellCase.of(CASE)
    assert written.typed is CASE  # a writer's case is never rebuilt
    verify = VerifyCell(implementation="x", case=CASE, case_id=CASE.id, check="output", status="pass")
    assert isinstance(verify.case, CellCase) and verify.case.typed == CASE


def test_files_written_with_string_keys_read_into_the_same_typed_keys(tmp_path: Path) -> None:
    v1 = read_run(DATA / "main-job-bench.json")  # schema v1, before the keys were typed
    assert v1.schema_version == 1 and v1.peaks and all(isinstance(k, PeakKey) for k in v1.peaks)
    assert PeakKey("float32", "cpu") in v1.peaks
    cells = v1.bench_cells()
    assert cells and all(isinstance(c.peak_key, PeakKey) and c.peak_key in v1.peaks for c in cells if c.peak_key)
    assert all(isinstance(c.case, CellCase) and c.case.typed is not None for c in cells)
    document = _run(_cell()).to_json()
    document["schema_version"] = 3
    document["peaks"] = {"float32/cpu@a@b/c": {"gflops": 1.0}, "bfloat16/cuda": {"gflops": 2.0}}
    document["bandwidth"] = {"cuda/threads=default@": {"read_gbps": 3.0}, "cpu/threads=16": {"read_gbps": 4.0}}
    path = tmp_path / "v3.json"
    write_json_atomic(path, document)
    read = read_run(path)
    assert set(read.peaks) == {PeakKey("float32", "cpu", "a@b/c"), PeakKey("bfloat16", "cuda")}
    assert set(read.bandwidth or {}) == {BandwidthKey("cuda", None, ""), BandwidthKey("cpu", 16)}
    assert read.to_json()["peaks"] == document["peaks"] and read.to_json()["bandwidth"] == document["bandwidth"]


@pytest.mark.parametrize(("where", "value", "named"), [
    ("peaks", {"float32": {"gflops": 1.0}}, "peaks['float32']"),
    ("peaks", {"/cpu@k": {"gflops": 1.0}}, "peaks['/cpu@k']"),
    ("bandwidth", {"cpu/threads=two": {"read_gbps": 1.0}}, "bandwidth['cpu/threads=two']"),
    ("bandwidth", {"cpu": {"read_gbps": 1.0}}, "bandwidth['cpu']"),
    ("peak_key", "float32-cpu", "cells[0].peak_key"),
    ("peak_key", 7, "cells[0].peak_key"),
])
def test_a_key_that_is_no_key_is_a_named_error(tmp_path: Path, where: str, value: object, named: str) -> None:
    document = _run(_cell()).to_json()
    if where == "peak_key":
        document["cells"][0]["peak_key"] = value
    else:
        document[where] = value
    path = tmp_path / "damaged.json"
    write_json_atomic(path, document)
    with pytest.raises(UsageError) as info:
        read_run(path)
    assert f"a damaged result file: {named}" in str(info.value)


_WORD = st.text(st.characters(blacklist_characters="/@", blacklist_categories=("Cs",)), min_size=1, max_size=8)
_KIND = st.none() | st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)


@given(_WORD, _WORD, _KIND, st.none() | st.integers(0, 10**6))
def test_every_key_reads_back_from_its_text(dtype: str, device: str, kind: str | None, threads: int | None) -> None:
    peak = PeakKey(dtype, device, kind)
    assert PeakKey.from_json(peak.to_json()) == peak and str(peak) == peak.to_json()
    bandwidth = BandwidthKey(device, threads, kind)
    assert BandwidthKey.from_json(bandwidth.to_json()) == bandwidth
    assert peak.on(None) == PeakKey(dtype, device) and bandwidth.on("k").kind == "k"


def test_keys_sort_as_their_stored_text() -> None:
    keys = [PeakKey("float64", "cpu"), PeakKey("float32", "cpu", "b"), PeakKey("float32", "cpu"),
            PeakKey("float32", "cpu", "")]
    assert [k.to_json() for k in sorted(keys)] == sorted(k.to_json() for k in keys)


def test_nothing_outside_the_keys_module_reads_a_key_out_of_its_text() -> None:
    """No ``split``/``partition`` on "@" or "/" (how a key's text was taken apart) anywhere else in the harness."""
    found = []
    for path in sorted((ROOT / "harness").rglob("*.py")):
        if path == ROOT / "harness" / "results" / "keys.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("split", "rsplit", "partition", "rpartition", "removeprefix", "startswith")
                    and any(isinstance(a, ast.Constant) and isinstance(a.value, str) and ("@" in a.value or a.value == "/")
                            for a in node.args)):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not found, found
