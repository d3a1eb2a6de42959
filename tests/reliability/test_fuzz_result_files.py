"""A structure-aware fuzzer over result files feeds `report` and `compare`: exit 0, 1 or 2 only (never 3, an
internal error), and no raw string of the file in the page or the summaries. The test runs 120
examples, the same ones each time (``ATTNBENCH_FUZZ_EXAMPLES`` sets how many, with random seeds);
``python3 -m benchmarks.fuzz_result_files`` runs thousands and prints what they did."""

from __future__ import annotations

import os
from typing import Any

import pytest
from fuzz_documents import damaged_documents, run_both
from hypothesis import HealthCheck, given, settings

from harness.cli import main

EXAMPLES = int(os.environ.get("ATTNBENCH_FUZZ_EXAMPLES", "120"))


@pytest.mark.slow  # a property search of 120 reports and comparisons: out of the inner loop
@settings(max_examples=EXAMPLES, deadline=None, derandomize="ATTNBENCH_FUZZ_EXAMPLES" not in os.environ, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example])
@given(damaged_documents())
def test_damaged_result_files_are_exit_0_1_or_2_and_never_reach_the_page_raw(damaged: tuple[str, Any]) -> None:
    _, document = damaged
    run_both(document, main)
