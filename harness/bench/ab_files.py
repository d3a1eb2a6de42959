"""Each side of an A/B comparison as a bench result file: ``report --history`` and ``compare`` read them.

A side's cell holds one sample per round (the fastest of that side's calls in the round) and says
so (``sample_unit="round"``): rounds are independent replications, so ``compare`` may test them.
The file records the side's plugin commit and the packages it imported, as its worker saw them.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from harness.analysis.stats import summarize
from harness.bench.ab import BASE, HEAD, ABRun, CellRounds
from harness.reference.flops import attention_flops, compulsory_bytes
from harness.results import BenchCell, CellCase, ResultWriter, Status


def side_cell(cell: CellRounds, side: str, threads: int) -> BenchCell:
    """One side's bench cell: its per-round times as samples, or the failure of the cell."""
    samples = tuple(cell.base_s if side == BASE else cell.head_s)
    status = Status.OK if cell.status == "ok" else Status(cell.status)
    if status != Status.OK and cell.side not in (side, None) and status.is_problem:
        status = Status.SKIPPED  # the other side failed: this side's cell was not measured to the end
    flops = attention_flops(cell.case, cell.mode)
    stats = summarize(samples) if samples and status == Status.OK else None
    return BenchCell(
        implementation=cell.implementation, case=CellCase.of(cell.case), case_id=cell.case.id, mode=cell.mode,
        status=status, reason=cell.reason, flops=flops, bytes=float(compulsory_bytes(cell.case, cell.mode)),
        samples_s=samples if status == Status.OK else (), stats=stats, threads=threads,
        gflops=flops / stats.median / 1e9 if stats is not None and stats.median else None,
        load_average=statistics.median(cell.load) if cell.load else None, sample_unit="round")


def write_sides(run: ABRun, out: Path) -> dict[str, Path]:
    """``out/base.json`` and ``out/head.json``, each written whole; returns them by side."""
    settings = run.settings
    paths = {}
    for side in (BASE, HEAD):
        source = settings.base if side == BASE else settings.head
        config = {
            "suite": settings.suite, "only": list(settings.only), "plugins": [source], "threads": settings.threads,
            "device": settings.device, "timeout_s": settings.timeout_s, "overrides": settings.overrides,
            "rounds": settings.rounds, "calls": settings.calls, "processes": settings.processes,
            "clock": settings.clock,
            "ab": {"base": settings.base, "head": settings.head}}
        path = Path(out) / f"{side}.json"
        writer = ResultWriter(path, "bench", config, force=True, provenance=run.provenance.get(side))
        try:
            for cell in run.cells:
                writer.add(side_cell(cell, side, settings.threads))
            writer.finish()
        finally:
            writer.close()
        paths[side] = path
    return paths

