"""The suites' options: ``pytest suites/correctness --plugin my_plugin.py [--only NAME]``."""

from harness.pytest_plugin import pytest_addoption  # noqa: F401  (pytest hook)
