"""One verify run, start to finish: the cases of a suite (or a fuzz search) into a result file.

:func:`run` is what ``attnbench verify`` (and ``attnbench run``) calls and what a library user calls; the
command only maps its flags once into :class:`VerifySettings` and prints the typed run it gets back. The
settings' defaults are the command's defaults.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.contract.discovery import Registry, absolute_specs, load_registry
from harness.errors import DiskFull, Interrupted, PluginError, UsageError
from harness.results import RESULTS_DIR, Config, ResultWriter, Run, new_run_id
from harness.runtime.executor import open_executor
from harness.runtime.isolation import DEFAULT_TIMEOUT_S


@dataclass(frozen=True)
class VerifySettings:
    """What a verify run checks and how; stored (with the rule) as the result file's config."""

    suite: str = "quick"
    only: tuple[str, ...] = ()
    plugins: tuple[str, ...] = ()
    trials: int = 3
    timeout_s: float = DEFAULT_TIMEOUT_S
    jobs: int = 2
    """Implementations verified at the same time, each in its own worker."""
    maxfail: int | None = None
    """Stop an implementation after this many failing cases (``--maxfail``); its other cases are recorded as skipped."""
    fuzz: int | None = None
    """Search this many generated cases per implementation instead of running the suite."""
    fuzz_seed: int = 0
    fuzz_database: Path | None = None
    """Where failing fuzz cases are kept for replay (default: results/.hypothesis)."""
    progress: bool = field(default=True, compare=False)
    executor: str = "local"
    """"local" (worker processes here) or "ray" (every case a Ray task on the cluster at ``address``)."""
    address: str | None = None
    model: str | None = None
    """A catalogue model (``--model``, :mod:`harness.case.models`): check its calls instead of the suite's cases."""
    workload: tuple[str, ...] = ()
    """Serving batches (``--workload``, :mod:`harness.case.workload`): check them instead of the suite's cases."""


def default_out() -> Path:
    """Where a run's result file goes when no path is given: ``results/<run-id>.json``."""
    return RESULTS_DIR / f"{new_run_id('verify')}.json"


def _config(settings: VerifySettings, names: list[str], plugins: tuple[str, ...]) -> dict[str, Any]:
    """The result file's config: the settings a reader needs, and the rule; a combination no run can honour
    is a usage error here, before anything is written."""
    from harness.reference.tolerance import rule_config

    config: dict[str, Any] = {"suite": settings.suite, "trials": settings.trials, "timeout_s": settings.timeout_s,
                              "jobs": settings.jobs, "implementations": names, "plugins": list(plugins), **rule_config()}
    if settings.executor != "local":  # written only when used: a local run's config is as before
        config.update(executor=settings.executor, address=settings.address)
    if settings.maxfail is not None:  # written only when used, as the executor is
        if settings.fuzz:
            raise UsageError("--maxfail stops a suite's (or --model's) cases; --fuzz already stops at its first "
                             "failure: drop --maxfail")
        config.update(maxfail=settings.maxfail)
    if settings.executor == "ray" and settings.fuzz:
        raise UsageError("--fuzz runs on this machine (its search is sequential); drop --executor ray")
    return config


def run(settings: VerifySettings, out: Path | None = None, *, force: bool = False,
        registry: Registry | None = None) -> Run:
    """Verify what ``settings`` select into ``out`` (default ``results/<run-id>.json``); return the run.

    A Ctrl-C leaves a valid file (``complete: false``) and raises
    :class:`~harness.errors.Interrupted` saying where it is.
    """
    from harness.verify.runner import VerifyRun

    plugins = absolute_specs(settings.plugins)
    if registry is None:
        registry = load_registry(plugins)
        if registry.fatal_errors:
            raise PluginError("; ".join(str(e) for e in registry.fatal_errors))
    impls = registry.select(list(settings.only))
    sources = {impl.name: registry.sources[impl.name] for impl in impls}
    path = Path(out) if out is not None else default_out()
    config = _config(settings, [i.name for i in impls], plugins)
    model_plan = None
    if settings.model is not None:
        from harness.case.models import model_named
        from harness.verify.model_cases import model_config, model_plan_of

        if settings.fuzz:
            raise UsageError("--model checks the model's own calls; --fuzz searches the declared space: choose one")
        model_plan = model_plan_of(model_named(settings.model))
        config.update(suite=None, **model_config(model_plan))
    workloads = None
    if settings.workload:
        from harness.case.workload import parse_workloads

        if settings.fuzz or settings.model is not None:
            raise UsageError("--workload checks the batches it names; --model and --fuzz choose other cases: choose one")
        workloads = parse_workloads(list(settings.workload))
        config.update(suite=None, workload=list(settings.workload))
    if settings.fuzz:
        config.update(suite=None, fuzz=settings.fuzz, fuzz_seed=settings.fuzz_seed)
    with open_executor(settings.executor, settings.address, plugins) as executor:  # a bad --address writes nothing
        writer = ResultWriter(path, "verify", Config.from_json(config), force=force)
        writer.set("implementations", {  # the declared conventions every verdict assumed, among the capabilities
            impl.name: {"description": impl.description, "source": impl.source, **impl.capabilities()} for impl in impls})
        try:
            if settings.fuzz:
                from harness.verify.fuzz import DATABASE_DIR, run_fuzz

                database = settings.fuzz_database or DATABASE_DIR
                run_fuzz(impls, plugins, sources, settings.fuzz, settings.fuzz_seed, settings.timeout_s, writer, database)
            else:
                VerifyRun(impls, sources, settings.suite, settings.trials, settings.timeout_s, writer, jobs=settings.jobs,
                          progress_enabled=settings.progress, model=model_plan, maxfail=settings.maxfail,
                          workloads=workloads).run(executor)
            writer.finish()
            return writer.run
        except KeyboardInterrupt:
            what = "the searches so far" if settings.fuzz else f"{len(writer.cells)} checks so far"
            again = "" if settings.fuzz else "; run the same command again to verify everything"
            raise Interrupted(f"{what} are in {path} (complete: false){again}") from None
        except DiskFull as full:
            raise full.but(f"{writer.kept} checks are in {path} as last written (complete: false)",
                           "free some space, then run the same command again to verify everything") from None
        finally:
            writer.close()
