"""Does a report say what its reader must not trust? A synthetic bench result file (no timing) whose run went badly in
every way docs/reports.md names, reported by the real `attnbench report`, and each statement checked.

    PYTHONPATH=. python3 -m benchmarks.report_trust [--keep DIR]

The file (:func:`write_document`) holds a T sweep (256 to 2048, d 64, 4 heads) and a d sweep (32 to 128 at T 512) of:

- ``honest``: time as T^2 d, memory as T^2; its T = 1024 cell ran at 160% of the GEMM measured beside it in its
  rounds (a roof problem: left out of every ranking);
- ``rival``: twice as fast, but two of its cells were dropped under load (``implausible``: the worker's clock did not
  add up), among them T = 2048, and its T = 512 cell ran at 125% of the run's GEMM peak (flagged, still counted);
- ``capped``: flat, then a jump at the largest sizes: its exponent sits at the fit's bound (4);
- ``short``: measured at two sizes only.

Printed: the report's terminal output, then each requirement and the line of the report that meets it
(benchmarks/report_trust.txt keeps a run's output). An unmet requirement is an AssertionError.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import random
import tempfile
from pathlib import Path

from harness.analysis.stats import summarize
from harness.case.attention import AttentionCase
from harness.results import BenchCell, Run, write_json_atomic
from harness.results.cells import cell_to_json

TS = (256, 512, 1024, 2048)
DS = (32, 64, 128)
HEADS = 4
PEAK_GFLOPS = 1000.0
SPEED = {"honest": 2.0e-11, "rival": 1.0e-11, "capped": 1.0e-10, "short": 3.0e-11}
"""Seconds per unit of H·T²·d."""
CAPPED = {256: 1.0, 512: 1.1, 1024: 3.0, 2048: 40.0}
"""``capped``'s time at each T over its time at 256: fixed cost, then a jump no O(T^p) with p <= 4 follows."""
DROPPED = {("rival", 2048, 64), ("rival", 512, 128)}
"""(implementation, T, d) of the cells dropped under load."""
LOAD_REASON = ("the worker's clock does not agree with the parent's stamps (1.9 s of 4.2 s wall): "
               "the machine was loaded")


def _cell(name: str, case: AttentionCase, rng: random.Random) -> BenchCell:
    work = HEADS * case.tq * case.tk * case.d
    median = SPEED[name] * work * (CAPPED[case.tq] * (256 / case.tq) ** 2 if name == "capped" else 1.0)
    samples = tuple(median * (1 + rng.gauss(0, 0.01)) for _ in range(9))
    stats = summarize(list(samples))
    flops = 4.0 * work
    gflops = flops / stats["median"] / 1e9
    if name == "rival" and case.tq == 512 and case.d == 64:
        gflops = 1.25 * PEAK_GFLOPS  # above the run's peak: a low reading or a suspect cell, said beside it
    rounds = {"gemm_gflops": gflops / 1.6, "read_gbps": 50.0} if name == "honest" and case.tq == 1024 else None
    status, reason = ("implausible", LOAD_REASON) if (name, case.tq, case.d) in DROPPED else ("ok", None)
    return BenchCell(implementation=name, case=case.to_dict(), case_id=case.id, mode="fwd", status=status,
                     reason=reason, samples_s=samples, stats=stats, flops=flops, gflops=gflops,
                     peak_key="float32/cpu", threads=1, rounds=rounds,
                     memory={"peak_extra_bytes": 3 * 4 * HEADS * case.tq * case.tk, "method": "synthetic",
                             "output_bytes": 4 * HEADS * case.tq * case.d})


def cases(name: str, d_sweep: bool = True) -> list[AttentionCase]:
    ts = TS[:2] if name == "short" else TS
    out = [AttentionCase(heads=HEADS, tq=t, d=64) for t in ts]
    return out + ([AttentionCase(heads=HEADS, tq=512, d=d) for d in DS if d != 64] if name != "short" and d_sweep
                  else [])


def write_document(path: Path, d_sweep: bool = True) -> Path:
    """The bench result file described above, complete and valid, as bench would save it (without its d sweep
    when not ``d_sweep``: fewer fits, for a quick test)."""
    rng = random.Random(7)
    run = Run(run_id="trust-bench", command="bench", complete=True, config={"suite": "synthetic"},
              environment={"cpu_model": "a synthetic CPU", "cores": 2, "threads": 1},
              implementations={name: {"memory": "quadratic"} for name in SPEED},
              peaks={"float32/cpu": {"gflops": PEAK_GFLOPS}}, cells=())
    document = run.to_json()
    document["cells"] = [cell_to_json(_cell(name, case, rng)) for name in SPEED for case in cases(name, d_sweep)]
    write_json_atomic(path, document)
    return path


PRESENT, ABSENT = True, False
REQUIREMENTS = (
    ("the top of the page counts the cells left out and flagged, and why",
     "index.html", "3 bench cell(s) left out of every ranking and speedup (2 implausible, 1 roof problem)",
     PRESENT),
    ("and links to the table that names them",
     "index.html", '<a href="#set-aside">', PRESENT),
    ("that table names each cell dropped under load (implementation + case) with its reason",
     "summary.md", "| rival | B1-H4-T2048-d64-float32 | fwd | implausible | no | implausible: the worker's clock",
     PRESENT),
    ("the Markdown summary counts them in its headline",
     "summary.md", "**Cells left out or flagged:** 3 bench cell(s) left out", PRESENT),
    ("the terminal counts and names them",
     "stdout", "rival B1-H4-T2048-d64-float32 fwd: implausible: the worker's clock", PRESENT),
    ("the fastest at long T is ranked on one case without the dropped cell, and says who was not ranked",
     "summary.md", "(2 ranked on B1-H4-T2048-d64-float32; not ranked: rival (implausible); not measured here: short)",
     PRESENT),
    ("a cell above the roof read beside it is left out, with its share of that roof",
     "summary.md", "| honest | B1-H4-T1024-d64-float32 | fwd | ok | no | roof problem: 160% of the GEMM peak",
     PRESENT),
    ("so no speedup is computed against it (the baseline's T = 1024 cell)",
     "speedup.csv", "honest,1024,", ABSENT),
    ("a two-point sweep says too few points, and shows no exponent",
     "complexity.csv", "short,time,T,,,,2.0,,False,too few points (2 < 3): no fit", PRESENT),
    ("an exponent at the fit's bound is undecided, not ok",
     "complexity.csv", "capped,time,T,4.0,", PRESENT),
    ("",
     "summary.md", "| capped | time | T | 4 | [3.", PRESENT),
    ("",
     "summary.md", "undecided: exponent 4.00 at the fit's bound 4", PRESENT),
    ("a percentage above 100% of a roof is marked where it shows",
     "index.html", '<td class="num">125!</td>', PRESENT),
    ("with a footnote naming the causes",
     "index.html", "! above 100% of a roof measured in this run: either the roof was read low", PRESENT),
    ("and the likelier cause per cell, in the table and in bench.csv",
     "bench.csv", "low roof reading or a suspect cell: no roof was read beside it to tell", PRESENT),
)
"""(what is required, the file that must say it, the text that says it, whether it must be there or absent). A
requirement of several lines is continued by those with no description."""


def check(out: Path, stdout: str) -> list[tuple[str, str, str, bool]]:
    """Each requirement, where it was met and the text that meets it; AssertionError on the first unmet."""
    texts = {"stdout": stdout, **{name: (out / name).read_text() for name in ("index.html", "summary.md",
                                                                           "complexity.csv", "bench.csv",
                                                                           "speedup.csv")}}
    met = []
    for what, where, text, present in REQUIREMENTS:
        assert (text in texts[where]) == present, f"{what}: {text!r} {'not ' if present else ''}in {where}"
        met.append((what, where, text, present))
    return met


def report(directory: Path) -> tuple[Path, str]:
    """The document written in ``directory`` and reported by `attnbench report`; (the report's directory, stdout)."""
    from harness.cli import main

    path = write_document(directory / "trust-bench.json")
    out = directory / "report"
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        assert main(["report", str(path), "--out", str(out), "--baseline", "honest"]) == 0
    return out, stdout.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", type=Path, help="write the file and the report here (default: a temporary folder)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as temporary:
        directory = args.keep or Path(temporary)
        directory.mkdir(parents=True, exist_ok=True)
        out, stdout = report(directory)
        stdout = stdout.replace(f"{directory}/", "")  # the folder is this machine's: not part of the output
        print("$ attnbench report trust-bench.json --out report --baseline honest")
        print("\n".join(line for line in stdout.splitlines() if not line.startswith(("report: ", "summary: "))))
        print()
        for what, where, text, present in check(out, stdout):
            if what:
                print(f"ok  {what}")
            print(f"    {where} {'says' if present else 'lacks'}: {text}")
        print(f"\nall {sum(1 for what, *_ in REQUIREMENTS if what)} requirements met")


if __name__ == "__main__":
    main()
