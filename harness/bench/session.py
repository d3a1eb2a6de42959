"""One bench run, start to finish: plan the cells, measure them into a result file, finish.

:func:`run` is what ``attnbench bench`` (and ``attnbench run``) calls and what a library user calls; the
command only maps its flags once into :class:`~harness.bench.settings.BenchSettings` and prints the typed run
it gets back. What a run works out when it starts (the result file's path, the memory budget, plugins'
absolute paths) is worked out here, once, for every caller.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from harness.bench.module_cells import module_cells
from harness.bench.resume import resume_command
from harness.bench.runner import BenchRunner
from harness.bench.settings import BenchSettings
from harness.bench.sweeps import SUITES, PlannedCell, free_memory_bytes, plan
from harness.contract.discovery import Registry, absolute_specs
from harness.errors import DiskFull, Interrupted, PluginError, UsageError
from harness.results import RESULTS_DIR, BenchCell, Config, ResultWriter, Run, new_run_id
from harness.runtime.executor import open_executor

if TYPE_CHECKING:
    from harness.runtime.cluster.connect import RayCluster


def run(settings: BenchSettings, out: Path | None = None, *, resume: bool = False, force: bool = False,
        registry: Registry | None = None, on_start: Callable[[int], None] = lambda todo: None,
        on_cell: Callable[[BenchCell], None] = lambda cell: None) -> Run:
    """Measure what ``settings`` plan into ``out`` (default ``results/<run-id>.json``) and return the run.

    With ``resume``, ``out`` is an interrupted run's file: its cells are kept and only the
    missing ones measured. ``on_start`` hears how many cells are left to measure, ``on_cell``
    each cell as it is written. A Ctrl-C leaves a valid file and raises
    :class:`~harness.errors.Interrupted` saying how to finish it.
    """
    registry = _catalogue(settings) if registry is None else registry
    path = Path(out) if out is not None else default_out()
    settings = dataclasses.replace(settings, plugins=list(absolute_specs(settings.plugins)),  # resume from anywhere
                                   memory_budget_bytes=memory_budget_bytes(settings))
    names, cells = _planned(settings, registry)
    finish = resume_command(path, settings.plugins, settings.executor, settings.address)
    with open_executor(settings.executor, settings.address, settings.plugins) as executor:  # a bad --address writes nothing
        writer = ResultWriter(path, "bench", _config(settings), resume=resume, force=force)
        try:
            implementations = {  # what reports know of each implementation: they never import plugins
                impl.name: {"description": impl.description, "source": impl.source, **impl.capabilities()}
                for impl in registry if impl.name in names}
            writer.set("implementations", implementations)
            start = writer.run  # the file as opened: a resumed run's cells and roofs
            done = {cell.key for cell in start.cells}
            todo = [c for c in cells if c.key not in done]  # dropped here, once
            on_start(len(todo))
            executor.execute(_BenchJob(BenchRunner(settings, writer, registry, start, on_cell), todo))
            writer.finish()
            return writer.run
        except KeyboardInterrupt:
            raise Interrupted(f"{len(writer.cells)} cells are in {path}; finish with: {finish}") from None
        except DiskFull as full:
            raise full.but(f"{writer.kept} cells are in {path} as last written",
                           f"free some space, then finish with: {finish}") from None
        finally:
            writer.close()


def _catalogue(settings: BenchSettings) -> Registry:
    """The plugins' declarations, read in a worker: the parent, which keeps the time and judges, runs no plugin
    code."""
    from harness.bench.catalogue import load_catalogue

    registry = load_catalogue(settings.plugins)
    if registry.fatal_errors:
        raise PluginError("; ".join(str(e) for e in registry.fatal_errors))
    return registry


def _planned(settings: BenchSettings, registry: Registry) -> tuple[list[str], list[PlannedCell]]:
    """The implementations timed and the cells the settings plan for them; a usage error, said why, when a run
    could measure nothing (before the result file is touched)."""
    # Module-level implementations (kind="module") are timed when named (--only): the default run times kernels.
    selected = [impl for impl in registry.select(settings.only) if settings.only or impl.declared.kind == "kernel"]
    names = [impl.name for impl in selected]
    if settings.reference is not None and settings.reference not in names:
        raise UsageError(f"--reference {settings.reference}: not among the implementations timed "
                         f"({', '.join(names) or 'none'}); name one of them, or add it with --only")
    if settings.model is not None:
        from harness.bench.model_sweeps import model_plan

        cells = model_plan(settings.model, names, settings.overrides, settings.device, settings.suite)
    else:
        cells = plan(settings.suite, names, settings.overrides, settings.device)
    cells = module_cells(cells, {impl.name: impl for impl in selected})  # a module's cells: the layers making the calls
    if not cells:
        raise UsageError(_why_no_cells(settings, names, registry))
    return names, cells


def default_out() -> Path:
    """Where a run's result file goes when no path is given: ``results/<run-id>.json``."""
    return RESULTS_DIR / f"{new_run_id('bench')}.json"


def memory_budget_bytes(settings: BenchSettings) -> float:
    """Bytes a cell may be predicted to need: the settings' budget, or half the device's memory free now (the
    RAM's for CPU cells, the GPU's for CUDA ones)."""
    if settings.memory_budget_bytes is not None:
        return settings.memory_budget_bytes
    free = free_memory_bytes(settings.device)
    if free is None:
        raise UsageError("cannot read the free RAM here (/proc/meminfo); give --memory-budget GiB "
                         "(memory_budget_bytes in BenchSettings)")
    return float(free) / 2


def _config(settings: BenchSettings) -> Config:
    """The result file's config: the settings, and with ``--model`` the model's source and what its cells leave
    out (a feature the case space cannot express yet); resume reads the settings back and ignores the rest."""
    if settings.model is None:
        return settings.to_config()
    from harness.case.models import model_named

    model = model_named(settings.model)
    return Config.from_json({**settings.to_dict(), "model_source": model.source, "model_left_out": list(model.left_out())})


def _why_no_cells(settings: BenchSettings, names: list[str], registry: Registry) -> str:
    """What made the plan empty, and the flag to change."""
    if not names:
        return (f"no implementation to benchmark: {', '.join(settings.only) or 'the selection'} names no kernel "
                "implementation; see `attnbench list`")
    if all(impl.declared.kind == "module" for impl in registry.select(settings.only)):
        return (f"--suite {settings.suite} with these flags plans no call a module case expresses for "
                f"{', '.join(names)} (modules run forward self-attention and decode steps, no windows or packed "
                "sequences): drop --mode bwd/fwd+bwd or choose --suite quick, full or decode")
    axes = sorted(set(k for k, v in settings.overrides.items() if v) - {"mode", "dtype"})
    fixed = all("cases" in sweep for sweep in SUITES[settings.suite])
    if axes and fixed:
        flags = " ".join(f"--{axis}" for axis in axes)
        return (f"--suite {settings.suite} runs fixed cases (decode steps with their own Tq, Tk, batch and heads), "
                f"so {flags} selects none of them; drop {flags} (only --mode and --dtype apply to these cases)")
    return (f"--suite {settings.suite} with these flags plans no cell for {', '.join(names)}; "
            "drop or widen the axis flags (--T, --d, --heads, --batch, --dtype, --causal, --mode)")


@dataclasses.dataclass(frozen=True)
class _BenchJob:
    """The cells left to measure, as a :class:`~harness.runtime.executor.Job`."""

    runner: BenchRunner
    todo: list[PlannedCell]

    def run_here(self) -> None:
        self.runner.run(self.todo)

    def run_on(self, cluster: RayCluster) -> None:
        from harness.bench.distributed import run_on_cluster

        run_on_cluster(self.runner, self.todo, cluster)


def resume_settings(path: Path) -> BenchSettings:
    """The settings an interrupted bench file was started with, each checked as its flag is
    (:mod:`harness.bench.resume`: the caller takes plugins, executor and memory budget from its own
    command line, never from the file)."""
    from harness.bench.resume import stored_settings
    from harness.results import read_run

    done = read_run(path)
    if done.command != "bench":
        raise UsageError(f"{path} is a {done.command!r} result file, not a bench run")
    return stored_settings(path, done.config.to_json())
