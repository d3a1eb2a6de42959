"""The pytest-benchmark suite in this repository: the packaged one (:mod:`harness.performance`), collected here.

    pytest suites/performance --benchmark-json out.json          # in a checkout
    pytest --pyargs harness.performance --benchmark-json out.json  # anywhere attnbench is installed
"""

from harness.performance import pytest_generate_tests, test_attention  # noqa: F401  (collected by pytest)
