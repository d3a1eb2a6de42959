"""``bench --resume FILE``: a result file is data, never a command.

The file says what was measured (its cells) and with which settings (its ``config``), and resume takes
the settings that decide *what* to measure from it, so the finished file is one run. Nothing in the file
decides what code runs or where:

- plugins are imported only when the command line names them: ``--resume`` refuses unless the
  ``--plugin`` flags are the ones the file was run with, and lists them;
- the executor and its address come from the command line (default: local workers here), never from
  the file; a file run on a cluster says how it was run, and the command line decides;
- the memory budget is this machine's (``--memory-budget``, or half the free RAM now), never the one
  another machine had;
- every stored setting is checked as its flag is (a positive finite ``timeout_s``, known ``timing`` keys,
  known axes of known values), and anything else is a usage error naming it, exit 2.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.bench.settings import VALUE_PROBES, BenchSettings
from harness.bench.sweeps import AXES, SUITES
from harness.bench.timing import TimingConfig
from harness.case.dtypes import DTYPES
from harness.errors import UsageError
from harness.reference.flops import MODES

_TIMING = {f.name for f in dataclasses.fields(TimingConfig)}


def _positive(value: object, integer: bool = False) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return (not integer or isinstance(value, int) or float(value).is_integer()) and math.isfinite(value) and value > 0


def _words(choices: Sequence[object]) -> Callable[[object], bool]:
    return lambda value: value in choices


_SETTINGS: dict[str, tuple[Callable[[object], bool], str]] = {
    "suite": (_words(tuple(SUITES)), f"one of {', '.join(SUITES)} (as --suite)"),
    "timeout_s": (_positive, "a number of seconds above 0 (as --timeout)"),
    "threads": (lambda v: _positive(v, integer=True) and float(v) <= 4096,  # type: ignore[arg-type]
                "a whole number of threads above 0 (as --threads)"),
    "device": (_words(("cpu", "cuda")), "cpu or cuda (as --device)"),
    "memory": (lambda v: isinstance(v, bool), "true or false (as --no-memory)"),
    "cell_budget_s": (lambda v: v is None or _positive(v), "null or a number of seconds above 0 (as --cell-budget)"),
    "only": (lambda v: isinstance(v, list) and all(isinstance(x, str) and x for x in v),
             "a list of implementation names (as --only)"),
    "plugins": (lambda v: isinstance(v, list) and all(isinstance(x, str) and x for x in v),
                "a list of plugin paths or modules (as --plugin)"),
    "model": (lambda v: v is None or (isinstance(v, str) and v in _models()), "null or a model of the catalogue "
              "(as --model; `attnbench bench --model list`)"),
    "reference": (lambda v: v is None or (isinstance(v, str) and bool(v)), "null or an implementation name"),
    "value_probe": (_words(VALUE_PROBES), f"one of {', '.join(VALUE_PROBES)} (as --value-probe)"),
}


def _models() -> set[str]:
    from harness.case.models import catalogue

    return set(catalogue())
_TIMING_CHECKS: dict[str, tuple[Callable[[object], bool], str]] = {
    "warmup_s": (lambda v: _positive(v) or v == 0, "a number of seconds, 0 or more"),
    "budget_s": (_positive, "a number of seconds above 0 (as --budget)"),
    "min_samples": (lambda v: _positive(v, integer=True), "a whole number above 0 (as --min-samples)"),
    "max_samples": (lambda v: _positive(v, integer=True), "a whole number above 0"),
    "warm_cache": (lambda v: isinstance(v, bool), "true or false (as --warm-cache)"),
    "checks": (lambda v: isinstance(v, bool), "true or false"),
    "clock": (_words(("cpu", "wall")), "cpu or wall (as --clock)"),
    "rounds": (lambda v: _positive(v, integer=True), "a whole number above 0 (as --rounds)"),
    "roof_budget_s": (lambda v: v is None or _positive(v), "null or a number of seconds above 0 (as --roof-budget)"),
}
_AXIS_VALUES: dict[str, Callable[[object], bool]] = {
    "T": lambda v: _positive(v, integer=True), "d": lambda v: _positive(v, integer=True),
    "heads": lambda v: _positive(v, integer=True), "batch": lambda v: _positive(v, integer=True),
    "dtype": _words(DTYPES), "causal": lambda v: isinstance(v, bool), "mode": _words(MODES),
}


def stored_settings(path: Path, config: Mapping[str, Any]) -> BenchSettings:
    """The settings a bench file was run with, each checked as its flag is; a UsageError names the first
    that is not a setting this attnbench would take."""
    def bad(name: str, value: object, what: str) -> UsageError:
        return UsageError(f"{path}: cannot resume: its config.{name} {value!r:.60} is not {what}; "
                          "a damaged or edited result file (start a new run instead)")

    for name, (ok, what) in _SETTINGS.items():
        if name in config and not ok(config[name]):
            raise bad(name, config[name], what)
    timing = config.get("timing", {})
    if not isinstance(timing, Mapping):
        raise bad("timing", timing, "an object of timing settings")
    unknown = sorted(set(timing) - _TIMING)
    if unknown:
        raise UsageError(f"{path}: cannot resume: its config.timing has unknown setting(s) {', '.join(unknown)} "
                         f"(known: {', '.join(sorted(_TIMING))}); written by another attnbench, or edited")
    for name, (ok, what) in _TIMING_CHECKS.items():
        if name in timing and not ok(timing[name]):
            raise bad(f"timing.{name}", timing[name], what)
    overrides = config.get("overrides", {})
    if not isinstance(overrides, Mapping):
        raise bad("overrides", overrides, "an object of sweep axes")
    for axis, values in overrides.items():
        if axis not in _AXIS_VALUES:
            raise bad(f"overrides.{axis}", values, f"a sweep axis ({', '.join(AXES)})")
        if not isinstance(values, list) or not all(_AXIS_VALUES[axis](v) for v in values):
            raise bad(f"overrides.{axis}", values, f"a list of {axis} values")
    return BenchSettings.from_dict(config)


def require_same_plugins(path: Path, stored: Sequence[str], given: Sequence[str]) -> None:
    """A UsageError unless the command line names the plugins the file was run with (a file never
    imports code by itself)."""
    if sorted(_as_given(path, stored, given)) == sorted(given):
        return
    flags = " ".join(f"--plugin {spec}" for spec in stored) or "no --plugin"
    raise UsageError(f"{path} was run with {flags}; a result file never loads code by itself: resume it with "
                     f"the same --plugin flags (given: {' '.join(given) or 'none'})")


def _as_given(path: Path, stored: Sequence[str], given: Sequence[str]) -> list[str]:
    """The stored plugin specs as the command line's (absolute) ones: a relative stored path is read against the
    result file's folder, or else the working directory (an older or hand-written file), whichever is given."""
    from harness.contract.discovery import ROOTED, absolute_specs

    out = []
    for spec in stored:
        root = spec.partition(ROOTED)[0] if ROOTED in spec and not spec.endswith(".py") else spec
        if not (spec.endswith(".py") or ROOTED in spec or "/" in spec) or Path(root).is_absolute():
            out.append(spec)
            continue
        beside = absolute_specs([str(Path(path).parent / spec)])[0]
        here = absolute_specs([spec])[0]
        out.append(beside if beside in given or here not in given else here)
    return out


def resume_command(path: Path, plugins: Sequence[str], executor: str = "local", address: str | None = None) -> str:
    """The command that finishes the run in ``path``: the same plugins and executor, given on the command line."""
    flags = "".join(f" --plugin {spec}" for spec in plugins)
    if executor != "local":
        flags += f" --executor {executor}" + (f" --address {address}" if address else "")
    return f"attnbench bench --resume {path}{flags}"
