"""Serving batches: verify catches kernels that mis-place a request's new tokens against its cache, and accepts
correct ones.

Each plugin in ``serving/`` computes a batch request by request with one mistake a serving kernel makes (the
cached prefix's offset with the wrong sign, decode steps given a top-left causal mask, a chunk that ignores the
prefix cached before it), beside one correct one. They run on one mixed batch (``--workload``'s grammar:
prompts, a chunk, decode and speculative steps), with the checks a verify worker runs, two trials: a broken one
must fail the output check, a correct one (and the built-ins that take packed sequences) must pass every check.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from blind_sets import TRIALS, BlindSet

from harness.case.workload import parse_workloads
from harness.contract.discovery import load_registry
from harness.verify.case_checks import check_kernel_case

pytestmark = pytest.mark.usefixtures("one_thread")

SERVING = BlindSet(Path(__file__).resolve().parent / "serving")
(BATCH,) = parse_workloads(["2q24_3s40_2spec3s20_chunk12q36"])
CASE = BATCH.case(heads=2, d=16)


def _failed(impl: object) -> list[str]:
    return [f"{r.check}: {r.status}: {r.reason}" for r in check_kernel_case(impl, CASE, TRIALS) if r.status != "pass"]


def test_the_batch_holds_every_kind_of_request() -> None:
    assert BATCH.kinds() == {"prefill": 2, "decode": 3, "speculative": 2, "chunked prefill": 1}


@pytest.mark.parametrize("name", SERVING.names("broken"))
def test_a_request_misplaced_against_its_cache_fails_the_output_check(name: str) -> None:
    results = list(check_kernel_case(SERVING.implementation(name), CASE, TRIALS))
    assert any(r.check == "output" and r.status == "fail" for r in results), [(r.check, r.status) for r in results]


@pytest.mark.parametrize("name", [*SERVING.names("correct"), "torch_sdpa", "tiled_fused"])
def test_a_correct_kernel_passes_every_check_of_the_batch(name: str) -> None:
    impl = SERVING.implementation(name) if name.startswith("correct") else load_registry(entry_points=False).get(name)
    assert not impl.not_supported_reasons(CASE), impl.not_supported_reasons(CASE)
    assert not _failed(impl)
