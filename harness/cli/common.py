"""What several commands share: loading the registry from ``--plugin`` and printing tables."""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable

from harness import interrupts
from harness.discovery import Registry, load_registry
from harness.errors import PluginError
from harness.report.terminal import format_table

__all__ = ["format_table", "positive_int", "positive_number", "probability", "registry_from_args"]


def registry_from_args(args: argparse.Namespace, load: Callable[[list[str]], Registry] = load_registry) -> Registry:
    """Load every implementation; warn about broken plugins, fail on a broken ``--plugin``. ``load`` is how
    (bench: :func:`harness.bench.catalogue.load_catalogue`, in a worker, so its parent runs no plugin code)."""
    registry = load(getattr(args, "plugin", []) or [])
    interrupts.check()  # plugins import torch, whose C++ start-up swallows a Ctrl-C
    for note in registry.notes:
        print(f"attnbench: note: {note}", file=sys.stderr)
    fatal = registry.fatal_errors
    for error in registry.errors:
        if error not in fatal:
            print(f"attnbench: warning: {error}", file=sys.stderr)
    if fatal:
        raise PluginError("; ".join(str(e) for e in fatal))
    return registry


def positive_number(text: str) -> float:
    """An argparse type: a finite number > 0 (seconds, GiB); argparse turns the error into exit 2."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: give a finite number greater than 0")
    return value


def probability(text: str) -> float:
    """An argparse type: a number strictly between 0 and 1 (a significance level)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < value < 1:  # nan fails too
        raise argparse.ArgumentTypeError(f"{text!r}: give a number between 0 and 1 (exclusive), e.g. 0.05")
    return value


def positive_int(text: str) -> int:
    """An argparse type: a whole number >= 1 (threads, trials, samples)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give a whole number of at least 1")
    return value

