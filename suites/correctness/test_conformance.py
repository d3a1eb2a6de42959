"""The conformance suite in this repository: the packaged one (:mod:`harness.conformance`), collected here.

    pytest suites/correctness                                             # built-ins, the small suite
    pytest suites/correctness --attnbench-plugin my_plugin.py --attnbench-only my_attention
    pytest suites/correctness --attnbench-suite quick                     # or full; $ATTNBENCH_VERIFY_SUITE too
"""

import pytest

from harness.conformance import one_thread, pytest_generate_tests, test_conforms  # noqa: F401  (collected by pytest)

pytestmark = pytest.mark.tier  # every built-in against the oracle: CI runs it again capped (scripts/at_tier.py)
