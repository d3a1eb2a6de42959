"""The conformance suite: every selected implementation x every case of its suite, as pytest tests.

Shipped in the package, so that after ``pip install attnbench`` a kernel author runs it in their
own repository (the ``pytest11`` plugin, :mod:`harness.pytest_plugin`, collects it)::

    pytest --attnbench-plugin my_kernel.py                                  # the small suite
    pytest --attnbench-plugin my_kernel.py --attnbench-only my_attention --attnbench-suite quick

The test id is ``<implementation>-<case id>``; a case the implementation cannot run here is
skipped with its reason. The checks and the rule are those of ``attnbench verify`` (see
harness.verify.checks and harness.reference.tolerance), run in this process: a plugin that crashes
takes pytest down with it, so use ``attnbench verify`` (worker isolation) to triage a crash.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from harness.contract import plugin_state
from harness.contract.registry import Implementation
from harness.pytest_plugin import selected_implementations
from harness.verify.worker import kind_functions

DEFAULT_SUITE = "small"
TRIALS = 3


def _suite(config: pytest.Config) -> str:
    return config.getoption("attnbench_suite", default=None) or os.environ.get("ATTNBENCH_VERIFY_SUITE") or DEFAULT_SUITE


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "verify_item" not in metafunc.fixturenames:
        return
    suite = _suite(metafunc.config)
    params = []
    for impl in selected_implementations(metafunc.config):
        functions = kind_functions(impl.declared.kind)
        if isinstance(functions, str):
            params.append(pytest.param((impl, None, functions), id=impl.name))
            continue
        for case in functions[0](impl, suite):
            params.append(pytest.param((impl, case, None), id=f"{impl.name}-{case.id}"))
    metafunc.parametrize("verify_item", params)


@pytest.fixture
def one_thread() -> Iterator[None]:
    """One torch thread per check, as in `attnbench verify`'s workers: small problems, busy CI machines."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.mark.usefixtures("one_thread")
def test_conforms(verify_item: tuple[Implementation, Any, str | None]) -> None:
    impl, case, why_not = verify_item
    functions = kind_functions(impl.declared.kind)
    if why_not or isinstance(functions, str):
        pytest.skip(why_not or str(functions))
    reasons = impl.not_supported_reasons(case)
    if reasons:
        pytest.skip("; ".join(reasons))
    with plugin_state.exits_refused("in a call"):  # an os._exit(0) here would end pytest with a green status
        results = functions[1](impl, case, TRIALS)
    problems = [r for r in results if r.status not in ("pass", "skipped")]
    if problems:
        pytest.fail("\n".join(f"{r.check}: {r.status}: {r.reason}" for r in problems), pytrace=False)
