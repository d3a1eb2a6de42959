"""`attnbench list`: every implementation, its capabilities, and whether it can run here (or why not)."""

from __future__ import annotations

import argparse
import json
import os

from harness.cli import add_plugin_argument
from harness.commands.common import format_table, registry_from_args
from harness.discovery import Registry
from harness.registry import Implementation

HELP = "list implementations, their capabilities and availability"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_plugin_argument(parser)
    parser.add_argument("--json", action="store_true", help="print JSON for machines instead of a table")


def availability_here(impl: Implementation) -> str | None:
    """None if it runs on this machine's CPU (or on CUDA when present), else the reason."""
    from harness.cases import AttentionCase

    device = "cpu" if "cpu" in impl.devices else impl.devices[0]
    case = AttentionCase(dtype=impl.dtypes[0], device=device, kind=impl.kind)
    reasons = impl.not_supported_reasons(case)
    return "; ".join(reasons) if reasons else None


def describe(impl: Implementation) -> dict[str, object]:
    return {"name": impl.name, **impl.capabilities(), "available": availability_here(impl) is None,
            "reason": availability_here(impl), "description": impl.description, "source": impl.source}


def _flags(impl: Implementation) -> str:
    names = [f for f in ("causal", "mask", "gqa", "grad", "bias") if getattr(impl, f)]
    return ",".join(names) or "-"


def _short(path: str) -> str:
    try:
        return os.path.relpath(path) if not os.path.relpath(path).startswith("..") else path
    except ValueError:
        return path


def run(args: argparse.Namespace) -> int:
    registry: Registry = registry_from_args(args)
    entries = [describe(impl) for impl in registry]
    if args.json:
        print(json.dumps({"implementations": entries,
                          "load_errors": [{"source": e.source, "error": e.error} for e in registry.errors]},
                         indent=2))
        return 0
    rows = [
        (impl.name, impl.backend, ",".join(impl.devices), ",".join(impl.dtypes), _flags(impl),
         _short(impl.source), "yes" if e["available"] else f"no: {e['reason']}")
        for impl, e in zip(registry, entries)
    ]
    print(format_table(("name", "backend", "devices", "dtypes", "supports", "source", "available"), rows))
    return 0
