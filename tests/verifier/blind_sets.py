"""The blind sets' one procedure: load a plugin of a set, run quick's checks on it in this process, and judge.

``test_blind.py`` (``blind/``) and ``test_blind_models.py`` (``blind_models/``) hold two sets written apart, each with its
own triggers; what they do with a plugin is the same, so it is written once here: the checks run exactly as a
verify worker runs them (``kernel_cases`` or ``module_cases`` for the cases, ``check_kernel_case`` or
``check_module_case`` for the checks, two trials; the tests hold one torch thread), so no worker start-up is
paid. ``blind_models/measure.py`` prints the same judgement for a whole set.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.contract.discovery import load_registry
from harness.contract.registry import Implementation
from harness.verify.case_checks import check_kernel_case
from harness.verify.modules import check_module_case, module_cases
from harness.verify.suites import kernel_cases

TRIALS = 2
"""Two seeded trials, fresh inputs each (verify runs three by default): a cached or stale answer shows on the second."""

Trigger = Callable[[Any], bool]
"""A predicate on an AttentionCase (kernel plugins) or a ModuleCase (module plugins): the case has the bug's trigger."""

Problem = tuple[Any, dict[str, Any]]
"""(case, result) of a check that neither passed nor was skipped."""


@dataclass(frozen=True)
class BlindSet:
    """A folder of plugins named ``broken<tag>_*.py`` and ``correct<tag>_*.py``, each registering its file's stem."""

    folder: Path
    tag: str = ""

    def names(self, kind: str) -> list[str]:
        """The set's ``broken`` or ``correct`` plugins, sorted (the tests' ids)."""
        return sorted(p.stem for p in self.folder.glob(f"{kind}{self.tag}_*.py"))

    def implementation(self, name: str) -> Implementation:
        """The plugin loaded as a user's file is (no built-ins, no entry points beside it)."""
        registry = load_registry([str(self.folder / f"{name}.py")], builtins=False, entry_points=False)
        assert not registry.fatal_errors, registry.fatal_errors
        return registry.get(name)


def problems(impl: Implementation, suite: str = "quick") -> Iterator[Problem]:
    """Every (case, result) of ``suite`` that is not a pass or a skip, in suite order, lazily (a caught plugin
    stops at its first problem when the caller takes one)."""
    module = impl.declared.kind == "module"
    for case in module_cases(impl, suite) if module else kernel_cases(impl, suite):
        if impl.not_supported_reasons(case) or (module and case.unsupported_by(impl)):
            continue
        for result in check_module_case(impl, case, TRIALS) if module else check_kernel_case(impl, case, TRIALS):
            if result["status"] not in ("pass", "skipped"):
                yield case, result


@functools.cache
def first_problem(blind: BlindSet, name: str) -> Problem | None:
    """Quick's first problem with the plugin ``name`` of ``blind`` (None: it passed), found once per test process:
    tests that judge the same plugin's first problem differently share its run."""
    return next(problems(blind.implementation(name)), None)


def assert_flagged_on_its_trigger(blind: BlindSet, name: str, trigger: Trigger) -> Problem:
    """Quick flags the broken plugin, and first on a case with its trigger (else a false alarm, or the trigger is
    stated wrongly); the first problem is returned."""
    first = first_problem(blind, name)
    assert first is not None, f"verify --suite quick passed {name}"
    case, result = first
    assert trigger(case), (f"{name} was flagged on {case.id} ({result['check']}: {result['reason']}), a case "
                           f"without its trigger: a false alarm, or the trigger is stated wrongly")
    return first


def assert_accepted(blind: BlindSet, name: str) -> None:
    """Quick passes the correct plugin on every case it can express."""
    found = [f"{case.id} {result['check']}: {result['status']}: {result['reason']}"
             for case, result in problems(blind.implementation(name))]
    assert not found, "\n".join(found)
