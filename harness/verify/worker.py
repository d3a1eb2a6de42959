"""What runs inside a verify worker process: load one implementation and its kind's checker, check one case.

The parent side (:mod:`harness.verify.runner`) and a cluster node (:mod:`harness.verify.distributed`)
both send these functions to isolated workers; they import nothing of either.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from harness.contract.registry import Implementation
from harness.verify.outcome import CheckResult

CasesFn = Callable[[Implementation, str], list[Any]]
CheckFn = Callable[[Implementation, Any, int], list[CheckResult]]


def _kernel() -> tuple[CasesFn, CheckFn]:
    from harness.verify.case_checks import check_kernel_case
    from harness.verify.suites import kernel_cases

    return kernel_cases, check_kernel_case


def _module() -> tuple[CasesFn, CheckFn]:
    module = importlib.import_module("harness.verify.modules")
    return module.module_cases, module.check_module_case


KINDS: dict[str, Callable[[], tuple[CasesFn, CheckFn]]] = {"kernel": _kernel, "module": _module}
"""kind -> a loader of (cases(impl, suite), check(impl, case, trials))."""


def kind_functions(kind: str) -> tuple[CasesFn, CheckFn] | str:
    """The case generator and checker of ``kind``, or the reason they are not available."""
    loader = KINDS.get(kind)
    if loader is None:
        return f"no verifier for kind {kind!r} (known: {', '.join(KINDS)})"
    try:
        return loader()
    except ModuleNotFoundError as exc:
        return f"the {kind} verifier is not available ({exc}); {kind} implementations are not verified yet"


WARM_UP_TIMEOUT_S = 300.0
"""A fresh worker imports torch and its implementation's plugin before its first case: not part of a case's time limit."""


def _worker_impl(source: str, name: str, threads: int) -> tuple[Implementation, CheckFn]:
    import torch

    from harness.contract.discovery import load_implementation

    if threads and torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    impl = load_implementation(source, name)
    functions = kind_functions(impl.declared.kind)
    if isinstance(functions, str):
        raise TypeError(functions)
    return impl, functions[1]


def warm_up(source: str, name: str, threads: int) -> None:
    """In a fresh worker: load the implementation's source (its import may build a C++ extension: on a cluster
    node, for the first time) and the checker, so that case timeouts time only cases."""
    _worker_impl(source, name, threads)


def run_case(source: str, name: str, case: Any, trials: int, threads: int) -> list[CheckResult]:
    """In the worker: every check of one case for implementation ``name`` (declared by ``source``)."""
    impl, check = _worker_impl(source, name, threads)
    return check(impl, case, trials)
