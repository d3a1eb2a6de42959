"""`attnbench`: the command line. Subcommands live in :mod:`harness.commands`, one module each.

Exit status: 0 success; 1 the command worked and found a problem (a failed case, a
regression); 2 bad usage or input (unknown flag, missing file, a ``--plugin`` that does
not load); 130 interrupted.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Sequence

from harness import __version__
from harness.errors import AttnbenchError

COMMANDS = ("list", "verify", "bench", "report", "compare", "run")

EXIT_OK, EXIT_PROBLEM, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


def _command_module(name: str):  # type: ignore[no-untyped-def]
    try:
        return importlib.import_module(f"harness.commands.{name}_cmd")
    except ModuleNotFoundError as exc:
        if exc.name == f"harness.commands.{name}_cmd":
            return None  # not built yet
        raise


def add_plugin_argument(parser: argparse.ArgumentParser) -> None:
    """``--plugin`` for every command that loads implementations."""
    parser.add_argument(
        "--plugin", action="append", default=[], metavar="PATH.py|MODULE",
        help="load implementations from a Python file or an importable module (repeatable)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="attnbench",
        description="Verify, benchmark and compare attention implementations (softmax(QK^T/sqrt(d))V).",
        epilog="Exit status: 0 ok, 1 a failure or regression found, 2 usage or input error. "
               "`attnbench COMMAND --help` for each command.",
    )
    parser.add_argument("--version", action="version", version=f"attnbench {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        module = _command_module(name)
        if module is None:
            continue
        description = getattr(module, "DESCRIPTION", module.HELP).replace("``", "`")  # docstrings are reST
        command = sub.add_parser(name, help=module.HELP, description=description)
        module.add_arguments(command)
        command.set_defaults(_run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "_run", None):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        return int(args._run(args))
    except AttnbenchError as exc:
        print(f"attnbench {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(f"attnbench {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
