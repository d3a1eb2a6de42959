"""`attnbench`: the command line. Subcommands live in :mod:`harness.cli`, one module each (``<name>_cmd``).

Exit status: 0 success; 1 the command worked and found a problem (a failed case, a
regression); 2 bad usage or input (unknown flag, missing file, a ``--plugin`` that does
not load); 3 an internal error (a bug in attnbench: never confused with "found a problem");
130 interrupted (Ctrl-C); 143 stopped by SIGTERM and 129 by SIGHUP, each handled as Ctrl-C is.

Start-up stays light: command modules import torch, pandas and matplotlib inside their
``run``, never at module level, so ``--help`` answers at once and the Ctrl-C handler
(:mod:`harness.runtime.interrupts`) is in place before any heavy import begins.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from harness import __version__
from harness.errors import DISK_FULL_ERRNOS, AttnbenchError, UsageError, printable
from harness.runtime import interrupts, isolation, streams

COMMANDS = ("list", "verify", "bench", "report", "compare", "ab", "run")

EXIT_OK, EXIT_PROBLEM, EXIT_USAGE, EXIT_INTERNAL, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


def _command_module(name: str):  # type: ignore[no-untyped-def]
    try:
        return importlib.import_module(f"harness.cli.{name}_cmd")
    except ModuleNotFoundError as exc:
        if exc.name == f"harness.cli.{name}_cmd":
            return None  # not built yet
        raise


def add_plugin_argument(parser: argparse.ArgumentParser) -> None:
    """``--plugin`` for every command that loads implementations."""
    parser.add_argument(
        "--plugin", action="append", default=[], metavar="PATH.py|MODULE",
        help="load implementations from a Python file or an importable module (repeatable)",
    )


def add_executor_arguments(parser: argparse.ArgumentParser) -> None:
    """``--executor`` and ``--address`` for the commands that run cases or cells (verify, bench, run)."""
    parser.add_argument("--executor", choices=("local", "ray"), default=None,
                        help="where cases and cells run: local worker processes (default), or ray: each one a Ray "
                             "task on a cluster, timing cells alone on their node (needs attnbench[ray])")
    parser.add_argument("--address", metavar="HOST:PORT",
                        help="the Ray cluster to use with --executor ray (default: the one `ray start` made on this "
                             "machine, or RAY_ADDRESS)")


def executor_from_args(args: argparse.Namespace) -> tuple[str, str | None]:
    """(executor, address) from the flags; a usage error (exit 2) saying how to install Ray when it is missing."""
    executor: str = args.executor or "local"
    address: str | None = args.address
    if address and executor != "ray":
        raise UsageError("--address names a Ray cluster; add --executor ray")
    if executor == "ray":
        from harness.runtime.cluster.connect import require_ray

        require_ray()
    return executor, address


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="attnbench",
        description="Verify, benchmark and compare attention implementations (softmax(QK^T/sqrt(d))V).",
        epilog="Exit status: 0 ok, 1 a failure or regression found, 2 usage or input error, "
               "3 internal error, 130 interrupted (143 SIGTERM, 129 SIGHUP). "
               "`attnbench COMMAND --help` for each command.",
    )
    parser.add_argument("--version", action="version", version=f"attnbench {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        module = _command_module(name)
        if module is None:
            continue
        description = getattr(module, "DESCRIPTION", module.HELP).replace("``", "`")  # docstrings are reST
        command = sub.add_parser(name, help=module.HELP.replace("%", "%%"), description=description)  # help is %-formatted
        module.add_arguments(command)
        command.set_defaults(_run=module.run)
    return parser


def main(argv: Sequence[str] | None = None, *, nested: bool = False) -> int:
    """Run one command; return its exit status (see the module docstring).

    ``nested``: a step of another command, which says itself what a Ctrl-C left: the
    KeyboardInterrupt is raised on to it instead of printed here.
    """
    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = {signum: signal.getsignal(signum) for signum in interrupts.STOPPING_SIGNALS} if in_main_thread else {}
    if in_main_thread:
        interrupts.install()
    step = Step("attnbench", nested=nested)

    def parse_and_run() -> int:
        parser = build_parser()
        args = parser.parse_args(argv)
        if not getattr(args, "_run", None):
            parser.print_help(sys.stderr)
            return EXIT_USAGE
        step.command = f"attnbench {args.command}"
        return int(args._run(args))

    try:
        return step.exit_status(parse_and_run)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@dataclass
class Step:
    """A command as its messages name it (``attnbench bench``), and how its failures become exit statuses.

    :func:`main` runs each command through one; ``attnbench run`` runs its verify, bench and report
    steps through one each (``nested``: a Ctrl-C is raised on to ``run``, which says what it left).
    """

    command: str
    nested: bool = False

    def exit_status(self, call: Callable[[], int]) -> int:
        """``call``'s exit status, or the one its exception means (see the module docstring)."""
        try:
            code = int(call())
            interrupts.check()  # a Ctrl-C that library code swallowed still stops with 130
            return code
        except AttnbenchError as exc:
            print(f"{self.command}: error: {printable(exc, newlines=True)}", file=sys.stderr)
            return EXIT_USAGE
        except KeyboardInterrupt as exc:
            if self.nested:
                raise
            detail = f"; {printable(exc, newlines=True)}" if str(exc) else ""
            by = interrupts.signal_name()
            print(f"{self.command}: interrupted{f' ({by})' if by else ''}{detail}", file=sys.stderr)
            return interrupts.exit_code()
        except BrokenPipeError:  # stdout closed early (`attnbench list | head`): not an error of ours
            _silence_stdout()
            return EXIT_OK
        except OSError as exc:
            if exc.errno not in DISK_FULL_ERRNOS:
                return _internal(self.command)
            where = f" while writing {exc.filename}" if exc.filename else ""  # a step no writer of ours said more of
            print(f"{self.command}: error: {exc.strerror or exc}{where}; free some space and run the command again",
                  file=sys.stderr)
            return EXIT_USAGE
        except Exception:  # noqa: BLE001 - a bug of ours: say so, and never exit 1 ("found a problem")
            return _internal(self.command)


def _internal(command: str) -> int:
    """A bug of ours (called while the exception is being handled): its traceback, and exit 3."""
    traceback.print_exc()
    print(f"{command}: internal error (a bug in attnbench; please report it with the traceback above)",
          file=sys.stderr)
    return EXIT_INTERNAL


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush does not fail on a closed pipe."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


TIMING_COMMANDS = {"bench", "run", "ab"}
"""The commands whose workers time calls: they start with their heap on huge pages, so their forkserver (a fork of
the command) gives the timing workers the same."""


def entry() -> None:
    """The ``attnbench`` console script: :func:`main`, then an exit that a late Ctrl-C cannot turn into a traceback.
    First, a closed standard stream becomes /dev/null and an output encoding that lacks a character escapes it
    (:mod:`harness.runtime.streams`): stdout carries the answer alone, whatever the caller closed."""
    if set(sys.argv[1:2]) & TIMING_COMMANDS:
        isolation.huge_page_heaps_by_exec()  # its timing workers fork from it (isolation.HUGE_PAGE_HEAPS)
    streams.fill_standard_fds()
    streams.forgiving_encoding()
    isolation.command_process()
    code = main()

    def late_interrupt(signum: int, frame: object) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(128 + signum)

    for signum in interrupts.STOPPING_SIGNALS:
        signal.signal(signum, late_interrupt)
    leave(code)


def leave(code: int) -> None:
    """Exit with ``code`` once the exit handlers have run (the workers', the resource tracker's), without the
    interpreter's teardown of every module: with torch loaded that takes about half a second, and a caller
    reading the command's output to its end waits for it. Nothing is lost: the result files are closed and
    renamed into place before :func:`main` returns, and the standard streams are flushed here. While a thread
    that is not a daemon still runs, the usual exit waits for it."""
    import atexit
    import threading

    if any(t is not threading.main_thread() and not t.daemon and t.is_alive() for t in threading.enumerate()):
        sys.exit(code)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


if __name__ == "__main__":
    entry()
