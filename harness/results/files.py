"""Result files: one JSON document per run, versioned, written atomically as the run goes.

Measure -> store -> present runs one way: commands write cells here as they finish;
reports and comparisons read only these files. Every write replaces the file whole
(temporary file, fsync, ``os.replace``), so an interrupted run leaves a valid file whose
``complete`` is false, and ``--resume`` can finish it. The layout is
:mod:`harness.results.schema`'s: writers hand it typed cells, :func:`read_run` gives them back.

How a file is read and written (regular files only, a size cap, never through a link, whole or not at
all) is :mod:`harness.results.paths`', for every command.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import math
import os
import platform
import secrets
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness import __version__
from harness.errors import UsageError
from harness.results.paths import parse_json, read_text, refuse_link, write_atomic
from harness.results.records import Config, Environment
from harness.results.schema import READABLE_VERSIONS, SCHEMA, Cell, Run
from harness.runtime.cluster.node import cpu_model
from harness.runtime.filelock import RunLock
from harness.runtime.provenance import Provenance, plugin_provenance

RESULTS_DIR = Path("results")


def new_run_id(command: str) -> str:
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return f"{stamp}-{command}-{secrets.token_hex(2)}"


def _ram_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def _version(module: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(module)
    except metadata.PackageNotFoundError:
        return None


def _git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5,
                             cwd=Path(__file__).resolve().parent)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def environment() -> Environment:
    """Where and with what a run was made: enough to tell two runs' machines apart."""
    import torch

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return Environment(
        attnbench=__version__, python=platform.python_version(), platform=platform.platform(),
        cpu_model=cpu_model(), cores=os.cpu_count(), threads=torch.get_num_threads(),
        ram_bytes=_ram_bytes(), gpu=gpu,
        torch=torch.__version__, numpy=_version("numpy"), xformers=_version("xformers"),
        triton=_version("triton"), git_commit=_git_commit(),
        command_line=" ".join(sys.argv),
        time=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    )


def finite(value: Any) -> Any:
    """``value`` with every non-finite float (NaN, Infinity, -Infinity) as None: strict JSON has no word for
    them (Python writes bare ``NaN``, which Node, jq and most CI tools refuse). A NaN in a result file meant
    "not a number" (the error of an output that holds NaN): null says the same, and the cell's status and
    reason say what happened."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def dumps(data: Any, **options: Any) -> str:
    """``data`` as strict JSON (RFC 8259: no bare NaN or Infinity, see :func:`finite`); ``options`` as
    :func:`json.dumps`'. The usual value has no non-finite number and is encoded once, by the C encoder."""
    try:
        return json.dumps(data, allow_nan=False, default=str, **options)
    except ValueError:
        return json.dumps(finite(data), allow_nan=False, default=str, **options)


def encode_json(data: Any) -> str:
    """``data`` as strict JSON text: indented, except that each item of a top-level ``cells`` list is one line.

    A result file is rewritten whole as it grows, so its encoding must be fast: Python's indenting
    encoder is pure Python (measured 0.7 s per write of a 5,700-cell verify file, a third of a core
    over a run), while the C encoder writes a cell in microseconds. One cell per line also diffs well."""
    if not (isinstance(data, dict) and isinstance(data.get("cells"), list)):
        return dumps(data, indent=1)
    placeholder = f"cells-{secrets.token_hex(16)}"  # a string no other value can hold
    head = dumps({**data, "cells": placeholder}, indent=1)
    cells = ",\n  ".join(dumps(cell) for cell in data["cells"])
    return head.replace(f'"{placeholder}"', "[\n  " + cells + "\n ]" if cells else "[]", 1)


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON so that a reader (or a crash) never sees half a file (:func:`harness.results.paths.write_atomic`)."""
    write_atomic(Path(path), encode_json(data))


class ResultWriter:
    """A result file that grows cell by cell; each ``add`` leaves a valid file on disk.

    Cells are appended, never changed; the run's records (peaks, coverage,
    implementations) are set whole with :meth:`set`. The writer holds an exclusive lock on
    the file (:class:`~harness.runtime.filelock.RunLock`) from creation to :meth:`finish` or
    :meth:`close`, so two runs given one ``--out`` never interleave: the second refuses at
    once. It never replaces a file that is not a result file of the same command unless
    ``force`` is given.
    """

    RECORDS = ("implementations", "peaks", "coverage", "bandwidth")

    def __init__(self, path: Path, command: str, config: Config | Mapping[str, object], *, resume: bool = False,
                 force: bool = False, provenance: Provenance | None = None) -> None:
        """``config`` is the command's settings, a :class:`Config` or its stored form (a JSON object).
        ``provenance``: the plugins' commit and packages when they were loaded elsewhere (a worker);
        by default they are read from this process (:func:`harness.runtime.provenance.plugin_provenance`)."""
        self.path = Path(path)
        self._provenance = provenance
        config = Config.coerce(config)
        if not resume and not force:
            refuse_to_overwrite(self.path, command)
        self._lock: RunLock | None = RunLock.acquire(self.path)
        try:
            self._start(command, config, resume)
        except OSError as exc:
            self.close()
            raise UsageError(f"cannot write the result file {self.path}: {exc.strerror or exc}; "
                             f"choose a writable path") from None
        except BaseException:
            self.close()
            raise

    def _start(self, command: str, config: Config, resume: bool) -> None:
        if resume and self.path.exists():
            self._run = dataclasses.replace(read_run(self.path), complete=False)
        else:
            env = environment()
            made = self._provenance if self._provenance is not None else plugin_provenance(config.plugins or ())
            env = dataclasses.replace(env, plugin_commit=made.plugin_commit, plugin_commits=made.plugin_commits,
                                      plugin_packages=made.plugin_packages)
            if isinstance(config.threads, int):  # the count workers pin, not this process's default
                env = dataclasses.replace(env, threads=config.threads)
            self._run = Run(run_id=self.path.stem, command=command, complete=False, environment=env, config=config)
        self._cells: list[Cell] = list(self._run.cells)
        self.flush()

    @property
    def cells(self) -> tuple[Cell, ...]:
        return tuple(self._cells)

    @property
    def run(self) -> Run:
        """The run as it stands: what :func:`read_run` would give back after the next flush."""
        return dataclasses.replace(self._run, cells=tuple(self._cells))


    def add(self, cell: Cell) -> None:
        self.append(cell)
        self.flush()

    def append(self, cell: Cell) -> None:
        """Add a cell without writing yet (a caller that writes in batches calls :meth:`flush`)."""
        self._cells.append(cell)

    def set(self, record: str, value: Any) -> None:
        if record not in self.RECORDS:
            raise ValueError(f"{record!r} is not a run record; records: {self.RECORDS}")
        self._run = dataclasses.replace(self._run, **{record: value})
        self.flush()

    def finish(self) -> None:
        self._run = dataclasses.replace(self._run, complete=True)
        self.flush()
        self.close()

    def close(self) -> None:
        """Release the file for other runs (the file itself stays as last written)."""
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def flush(self) -> None:
        write_json_atomic(self.path, self.run.to_json())
        self._kept = len(self._cells)

    @property
    def kept(self) -> int:
        """How many cells the file on disk holds (as of the last write that succeeded)."""
        return getattr(self, "_kept", 0)


def check_out(path: Path, command: str, *, resume: bool = False, force: bool = False) -> None:
    """What :class:`ResultWriter` would refuse about ``path``, asked before a command spends anything: a file that is
    not ours to replace (unless ``force`` or ``resume``), a link, a path that cannot be written, another run's lock.
    The writer asks again when it opens the file; this only makes a bad ``--out`` cost a second, not a run's start."""
    if not resume and not force:
        refuse_to_overwrite(path, command)
    if path.parent.is_dir() or any(p.exists() and not p.is_dir() for p in path.parents):
        RunLock.acquire(path).release()  # a missing directory is the writer's to make: none for a run that may not start


def refuse_to_overwrite(path: Path, command: str) -> None:
    """A UsageError unless ``path`` is free, or an attnbench ``command`` result file (a re-run's to replace);
    never a link, a directory or another file that is not a regular file (nothing of it is read past the cap)."""
    if path.is_dir() and not path.is_symlink():
        raise UsageError(f"{path} is a directory; give the path of a result file (e.g. {path / 'run.json'})")
    refuse_link(path)
    if not path.exists():
        return
    try:
        data = json.loads(read_text(path))
        kind = f"an attnbench {data['command']} result file" if data.get("schema") == SCHEMA else "another JSON file"
    except UsageError as exc:
        if "not a regular file" in str(exc):
            raise
        kind = "not an attnbench result file"
    except (OSError, ValueError, TypeError, KeyError, AttributeError, RecursionError):  # any file may be here
        kind = "not an attnbench result file"
    if kind != f"an attnbench {command} result file":
        raise UsageError(f"{path} exists and is {kind}; refusing to overwrite it with {command} results. "
                         f"Choose another path, or pass --force to replace it")


def check_version(data: dict[str, Any], path: Path) -> None:
    """A UsageError unless ``data`` is a result file of a version this attnbench reads."""
    version = data.get("schema_version")
    readable = ", ".join(map(str, READABLE_VERSIONS))
    if isinstance(version, bool) or not isinstance(version, int):
        raise UsageError(f"{path}: a damaged result file: schema_version {json.dumps(version)[:40]} is "
                         f"{'missing' if version is None else 'not a number'}; a result file has "
                         f"\"schema_version\": {READABLE_VERSIONS[-1]} (this attnbench reads {readable})")
    if version not in READABLE_VERSIONS:
        raise UsageError(f"{path}: schema_version {version} is not supported "
                         f"(this attnbench reads {readable}); re-run with this version")


def load_results(path: Path) -> dict[str, Any]:
    """Read and check an attnbench result file: its JSON document, any readable version.

    For code that wants the stored form (``--json`` consumers, tests of the file itself);
    everything else reads the typed run with :func:`read_run`.
    """
    path = Path(path)
    try:
        data = parse_json(read_text(path), path)
    except FileNotFoundError:
        raise UsageError(f"{path}: no such result file") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise UsageError(f"{path}: not an attnbench result file (no \"schema\": \"{SCHEMA}\")")
    check_version(data, path)
    return data


def read_run(path: Path) -> Run:
    """The typed run of a result file (version 1 files are upgraded as they are read)."""
    data = load_results(path)
    try:
        return Run.from_json(data)
    except (ValueError, TypeError, KeyError) as exc:
        raise UsageError(f"{path}: a damaged result file: {exc}") from None
