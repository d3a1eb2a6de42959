"""`attnbench list`: every implementation, its capabilities, and whether it can run here (or why not).

The table keeps one short line per implementation (a reason such as xformers' runs to 400
characters): its ``available`` column holds the start of the reason, cut to fit. The full
reason is in ``--json`` and in the per-implementation view, ``attnbench list NAME``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import textwrap
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from harness.case.attention import AttentionCase
from harness.cli import add_plugin_argument
from harness.cli.common import format_table, positive_number, registry_from_args
from harness.contract.availability import reasons_or_failure, unsupported
from harness.contract.discovery import Registry
from harness.contract.registry import Implementation
from harness.runtime.isolation import WorkerPool, kill_all_workers, start_forkserver
from harness.runtime.process_tree import usable_cpus

if TYPE_CHECKING:  # harness.modules imports torch; `attnbench list --help` must not
    from harness.modules.cases import ModuleCase

HELP = "list implementations, their capabilities and availability"
CHECKS_AT_ONCE = 4
"""The most availability checks ``list`` asks at once (one worker each)."""
LIST_TIMEOUT_S = 600.0
"""How long one implementation's ``available=`` check may take in its worker (a first C++ build takes minutes)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_plugin_argument(parser)
    parser.add_argument("names", nargs="*", metavar="NAME",
                        help="show everything about these implementations, the full reason included")
    parser.add_argument("--json", action="store_true", help="print JSON for machines instead of a table")
    parser.add_argument("--timeout", type=positive_number, default=LIST_TIMEOUT_S, metavar="S",
                        help="seconds one implementation's availability check may take in its worker (default "
                             f"{LIST_TIMEOUT_S:g}: a first C++ build takes minutes)")


def availability_here(impl: Implementation, source: str, pool: WorkerPool) -> str | None:
    """None if it runs on this machine's CPU (or on CUDA when present), else the reason. Its own ``available=``
    check runs in a worker (:mod:`harness.contract.availability`): a check that hangs or crashes is that reason."""
    reasons = reasons_or_failure(unsupported(impl, probe_case(impl), source, pool))
    return "; ".join(reasons) if reasons else None


def probe_case(impl: Implementation) -> AttentionCase | ModuleCase:
    """The case ``impl`` is asked about: one of its own kind (a module is handed a module case, a kernel a kernel
    case), the simplest of it, in its first dtype, on the CPU where it runs there."""
    device = "cpu" if "cpu" in impl.declared.devices else impl.declared.devices[0]
    if impl.declared.kind == "module":
        from harness.modules.cases import ModuleCase, module_layers

        return ModuleCase(dtype=impl.declared.dtypes[0], device=device, layer=module_layers(impl)[0])
    return AttentionCase(dtype=impl.declared.dtypes[0], device=device)


def describe(impl: Implementation, reason: str | None) -> dict[str, object]:
    return {"name": impl.name, **impl.capabilities(), "available": reason is None,
            "reason": reason, "description": impl.description, "source": impl.source}


def _described(registry: Registry, impls: list[Implementation], timeout: float) -> list[dict[str, object]]:
    """Every implementation described, their checks asked in as many workers at once as there are CPUs (up to
    :data:`CHECKS_AT_ONCE`): each check waits on its worker's start and its plugin's imports, not on the others."""
    local = threading.local()
    pools: list[WorkerPool] = []

    def ask(impl: Implementation) -> dict[str, object]:
        pool = getattr(local, "pool", None)
        if pool is None:
            pool = local.pool = WorkerPool(timeout=timeout, start_method="forkserver")
            pools.append(pool)
        return describe(impl, availability_here(impl, registry.sources[impl.name], pool))

    jobs = max(1, min(CHECKS_AT_ONCE, usable_cpus(), len(impls)))
    try:
        with ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="available") as executor:
            return list(executor.map(ask, impls))
    except BaseException:  # Ctrl-C: the checks still running are abandoned with their workers
        kill_all_workers()
        raise
    finally:
        for pool in pools:
            pool.close()


SUPPORTS = ("causal", "mask", "gqa", "grad", "bias", "sinks", "softcap", "value_dim")
"""The declared features the table's ``supports`` column names (``value_dim``: V's head dim may differ from d)."""


def supports(impl: Implementation) -> str:
    """The ``supports`` column: each declared feature of :data:`SUPPORTS`, or ``-``."""
    names = [f for f in SUPPORTS if getattr(impl.declared, f)]
    return ",".join(names) or "-"


def _short(path: str) -> str:
    try:
        return os.path.relpath(path) if not os.path.relpath(path).startswith("..") else path
    except ValueError:
        return path


SHORT_REASON = 60
"""Characters of a reason the table shows before it points at ``attnbench list NAME``."""


def short_reason(reason: str, width: int = SHORT_REASON) -> str:
    """The reason's first clause, cut to ``width`` characters with an ellipsis."""
    first = reason.split("; ")[0]
    if len(first) <= width and first == reason:
        return first
    return (first if len(first) <= width - 1 else first[: width - 1].rstrip()) + "…"


def detail(entry: dict[str, object]) -> str:
    """Every field of one implementation, long text wrapped to the terminal."""
    width = max(60, shutil.get_terminal_size().columns)
    lines = []
    for key, value in entry.items():
        text = ", ".join(map(str, value)) if isinstance(value, list) else str(value)
        lines.append(textwrap.fill(text, width=width, initial_indent=f"{key + ':':<13}", subsequent_indent=" " * 13,
                                   break_long_words=False, break_on_hyphens=False))  # wrap at spaces only
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from harness.results.files import dumps  # strict JSON: no bare NaN from a plugin's capabilities

    start_forkserver(from_here=True)  # before the plugins load: the server may be this process, forked
    registry: Registry = registry_from_args(args)
    if args.names:
        chosen = registry.select(args.names)  # an unknown name is a usage error listing the known ones
        entries = _described(registry, chosen, args.timeout)
        print(dumps({"implementations": entries}, indent=2) if args.json
              else "\n\n".join(detail(e) for e in entries))
        return 0
    entries = _described(registry, list(registry), args.timeout)
    if args.json:
        print(dumps({"implementations": entries,
                     "load_errors": [{"source": e.source, "error": e.error} for e in registry.errors]},
                    indent=2))
        return 0
    rows = [
        (impl.name, impl.declared.backend, ",".join(impl.declared.devices), ",".join(impl.declared.dtypes), supports(impl),
         _short(impl.source), ("yes" if e["available"] else f"no: {short_reason(str(e['reason']))}")
         + (f" (on request: --only {impl.name})" if impl.declared.on_request else ""))
        for impl, e in zip(registry, entries)
    ]
    print(format_table(("name", "backend", "devices", "dtypes", "supports", "source", "available"), rows))
    if any(not e["available"] for e in entries):
        print("\nfull reasons: attnbench list NAME (or --json)")
    if any(impl.declared.on_request for impl in registry):
        print("on request: left out of verify, bench and run unless named with --only (a slow set-up, such as a compile)")
    return 0
