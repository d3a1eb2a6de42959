"""What several commands share: loading the registry from ``--plugin``, flag types, defaults, printing tables."""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
from collections.abc import Callable, Sequence
from typing import Any

from harness.contract.discovery import Registry, load_registry
from harness.errors import PluginError, printable
from harness.report.terminal import format_table
from harness.runtime import interrupts

__all__ = ["default_of", "format_table", "positive_int", "positive_number", "probability", "registry_from_args",
           "registry_of"]


def registry_from_args(args: argparse.Namespace, load: Callable[[list[str]], Registry] = load_registry) -> Registry:
    """:func:`registry_of` the ``--plugin`` flags."""
    return registry_of(args.plugin, load)


def registry_of(plugins: Sequence[str], load: Callable[[list[str]], Registry] = load_registry) -> Registry:
    """Load every implementation and ``plugins``; warn about broken plugins, fail on a broken ``--plugin``."""
    registry = load(list(plugins))
    interrupts.check()  # plugins import torch, whose C++ start-up swallows a Ctrl-C
    for note in registry.notes:
        print(f"attnbench: note: {printable(note)}", file=sys.stderr)
    fatal = registry.fatal_errors
    for error in registry.errors:
        if error not in fatal:
            print(f"attnbench: warning: {printable(error)}", file=sys.stderr)
    if fatal:
        raise PluginError("; ".join(str(e) for e in fatal))
    return registry


def default_of(settings: type, name: str) -> Any:
    """A settings record's default for field ``name``: flags take their defaults from the record the library
    reads, so a default is written once (in the record) and the command line and library callers agree."""
    field = {f.name: f for f in dataclasses.fields(settings)}[name]
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    raise TypeError(f"{settings.__name__}.{name} has no default")


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



