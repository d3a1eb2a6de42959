"""The flags that choose bench cases, shared by ``bench`` and ``ab``: a suite's axes replaced by the user's.

One group, one mapping (:func:`overrides_from_args`): both commands read ``--T 512 1024`` the same way and
hand the library the same typed overrides.
"""

from __future__ import annotations

import argparse
from typing import Any

from harness.case.dtypes import DTYPES
from harness.reference.flops import MODES

AXES = (("T", "sequence lengths"), ("d", "head dims"), ("heads", "query heads"), ("batch", "batch sizes"))
"""The integer axes a flag replaces (``--T``, ``--d``, ``--heads``, ``--batch``), with what each holds."""
CAUSAL = {"on": [True], "off": [False], "both": [False, True]}
"""``--causal``'s choices and the values of the causal axis each means."""


def sizes(text: str) -> list[int]:
    """An argparse type: whole numbers >= 1, space- or comma-separated (``512 1024`` or ``512,1024``)."""
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of integers (e.g. 512 1024 or 512,1024)") from None
    if any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: sizes must be >= 1")
    return values


def add_case_arguments(parser: argparse.ArgumentParser) -> None:
    """``--T``, ``--d``, ``--heads``, ``--batch``, ``--dtype``, ``--causal``, ``--mode``, ``--device`` and
    ``--workload``."""
    group = parser.add_argument_group("cases", "each flag replaces the suite's values on its axis")
    for axis, what in AXES:
        group.add_argument(f"--{axis}", nargs="+", type=sizes, metavar="N", help=f"{what} (replaces the suite's)")
    group.add_argument("--dtype", nargs="+", choices=DTYPES, help="dtypes (replaces the suite's)")
    group.add_argument("--causal", choices=tuple(CAUSAL), help="causal masking (replaces the suite's)")
    group.add_argument("--mode", nargs="+", choices=MODES, help="fwd, bwd, fwd+bwd (bwd modes need grad=True)")
    group.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    group.add_argument("--workload", nargs="+", metavar="SPEC",
                       help="serving batches instead of the suite's cases, each one call of packed requests with "
                            "bottom-right causal masking: vLLM's grammar (2q2k_32q1s1k: 2 prompts of 2,048 tokens "
                            "and 32 decode steps on 1,024 keys; spec4s1k, chunk512q4k) or a JSON trace "
                            "(docs/serving.md); --d, --heads, --dtype and --mode apply")


def overrides_from_args(args: argparse.Namespace) -> dict[str, list[Any]]:
    """The axes the flags replace, each with its values (an axis no flag names is the suite's)."""
    overrides: dict[str, list[Any]] = {}
    for axis, _ in AXES:
        lists: list[list[int]] | None = getattr(args, axis)
        if lists:
            overrides[axis] = [v for chunk in lists for v in chunk]
    if args.dtype:
        overrides["dtype"] = list(args.dtype)
    if args.causal:
        overrides["causal"] = CAUSAL[args.causal]
    if args.mode:
        overrides["mode"] = list(args.mode)
    if getattr(args, "workload", None):
        overrides["workload"] = list(args.workload)
    return overrides
