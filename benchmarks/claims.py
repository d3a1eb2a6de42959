"""Measure every performance target on this machine and write the tables of docs/performance.md.

    python3 -m benchmarks.claims [--out docs/performance.md] [--json-dir docs/claims]
        [--only tiled_fused,structured,decode] [--tiers avx2 avx512f avx512_bf16] [--rounds N]
    python3 -m benchmarks.claims --from-json docs/claims/*.json [--out FILE]   # tables only

Each targets script (``benchmarks/*_targets.py``) runs in its own process with ``--claims FILE``: it times
its contestants interleaved in that one process (a load change hits both sides alike) and writes its
figures beside their targets, with the machine it ran on (:mod:`benchmarks.claims_record`).
``tiled_fused_targets.py`` runs once per ISA tier the CPU has (``--isa``: torch runs as that tier's CPU
would too). Then every file becomes one table, headed by the machine (CPU model, ISA tier, threads,
torch version, load average, date). No figure in docs/performance.md is typed by hand: run this on
your own machine to get yours.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.claims_record import FORMAT, cpu_family_model, cpu_flags
from harness.runtime.cluster.node import cpu_model

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = {  # name -> (script, extra arguments)
    "tiled_fused": ("benchmarks/tiled_fused_targets.py", ["--no-memory"]),
    "structured": ("benchmarks/structured_targets.py", ["--no-flex"]),
    "decode": ("benchmarks/decode_targets.py", ["--more"]),
}
DATA = ROOT / "docs" / "claims"
"""The claims files docs/performance.md was written from (kept beside it: tests/test_docs_claims.py checks the
page is exactly what they render to, so no figure is edited by hand)."""
TIER_FLAGS = {"avx2": ("avx2", "fma"), "avx512f": ("avx512f",), "avx512_bf16": ("avx512f", "avx512_bf16")}
"""The CPU features each tiled_fused tier needs (implementations._fused_kernels.TIERS above generic)."""


def machine_tiers(flags: Sequence[str]) -> list[str]:
    """The tiers this CPU can run, lowest first."""
    return [t for t, need in TIER_FLAGS.items() if all(f in flags for f in need)]


def _available_gib() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return 0.0


def plan(only: Sequence[str], tiers: Sequence[str], json_dir: Path, rounds: int | None) -> list[tuple[list[str], Path]]:
    """The commands to run, each with the JSON file it writes."""
    runs: list[tuple[list[str], Path]] = []
    for name in only:
        script, extra = SCRIPTS[name]
        extra = [*extra, *(["--rounds", str(rounds)] if rounds else [])]
        if name == "decode" and _available_gib() < 16:
            extra.append("--no-sdpa")  # torch_sdpa at the 2 GiB cache needs about 10 GiB more
        variants = [[f"--isa={t}"] for t in tiers] if name == "tiled_fused" else [[]]
        for variant in variants:
            out = json_dir / (name + "".join("-" + a.split("=", 1)[1] for a in variant) + machine_tag() + ".json")
            # the scripts run in ROOT: a path relative to it makes the recorded command the same in any checkout
            where = out.relative_to(ROOT) if out.is_relative_to(ROOT) else out
            runs.append(([sys.executable, script, *extra, *variant, "--claims", str(where)], out))
    return runs


def machine_tag() -> str:
    """"-amd-epyc-f26m2": the CPU in a claims file's name, so that a run on another machine adds its own tables
    beside this one's instead of replacing them (a Zen 4 and a Zen 5 are both "AMD EPYC")."""
    ids = cpu_family_model()
    slug = "-".join(re.findall(r"[a-z0-9]+", cpu_model().lower()))[:40]
    return f"-{slug}" + (f"-f{ids['cpu_family']}m{ids['cpu_model_number']}" if ids else "")


def _cell(value: Any) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def _measured(row: dict[str, Any]) -> str:
    value, unit = float(row["value"]), row.get("unit", "")
    text = f"{value:.0f}" if unit == "%" else f"{value:.2f}"
    return text + unit


def machine_line(machine: dict[str, Any]) -> str:
    """One sentence naming what the figures came from."""
    flags = ", ".join(machine.get("cpu_flags") or []) or "none of AVX2/AVX-512 reported"
    load = ", ".join(f"{x:.2f}" for x in machine.get("load_before", []))
    after = ", ".join(f"{x:.2f}" for x in machine.get("load_after", []))
    aten = f", ATen {machine['aten_capability']} kernels" if machine.get("aten_capability") else ""
    ids = (f"family {machine['cpu_family']}, model {machine['cpu_model_number']}; "
           if machine.get("cpu_family") is not None else "")
    return (f"CPU: {machine.get('cpu', '?')} ({ids}{flags}); ISA tier: {machine.get('isa', '?')}; "
            f"{machine.get('threads', '?')} threads; torch {machine.get('torch', '?')}{aten}; "
            f"load average {load} before, {after} after; {machine.get('date', '?')}.")


def table(doc: dict[str, Any]) -> str:
    """One claims file as a Markdown section: the machine, the command, then a row per figure."""
    if doc.get("format") != FORMAT:
        raise ValueError(f"not a claims file ({FORMAT}): format {doc.get('format')!r}")
    rows = doc["rows"]
    tiers = any(r.get("tier") for r in rows)
    head = ["claim", *(["tier"] if tiers else []), "measured", "target", "met", "detail"]
    command = str(doc.get("command", "")).replace(f"{ROOT}{os.sep}", "")  # paths relative to the checkout
    machine = doc["machine"]
    cpu = machine.get("cpu", "?") + (f" (family {machine['cpu_family']}, model {machine['cpu_model_number']})"
                                     if machine.get("cpu_family") is not None else "")
    lines = [f"## {doc['title']}: {machine.get('isa', '?')}, {cpu}", "", machine_line(machine), "",
             f"Command: `{command}`", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        met = {True: "yes", False: "**no**", None: "-"}[r.get("met")]
        if r.get("met") is False and r.get("reachable") is not None:
            met = f"out of reach here: a measured roof allows {_measured({**r, 'value': r['reachable']})}"
        cells = [r["claim"], *([r.get("tier", "")] if tiers else []), _measured(r), r.get("target", ""), met,
                 r.get("detail", "")]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


def render(docs: Sequence[dict[str, Any]], command: str = "python3 -m benchmarks.claims") -> str:
    """docs/performance.md: a heading, how the page was made, then one table per claims file."""
    intro = ("# Performance\n\n"
             f"Every table on this page was written by `{command}` from the JSON files the targets scripts\n"
             "wrote; none is typed by hand. Each table names the machine it came from. Ratios are measured\n"
             "interleaved in one process, so they hold better than absolute times on a shared machine (a load\n"
             "average above the thread count means other jobs shared the cores); run the command on your own\n"
             "machine to get its figures (the README lists the targets).\n")
    return "\n".join([intro, *(table(d) for d in docs)])


def load(files: Sequence[Path]) -> list[dict[str, Any]]:
    """Claims files in the order they were measured (by their date), whatever order they are named in."""
    docs = [json.loads(Path(f).read_text()) for f in files]
    return sorted(docs, key=lambda d: str(d.get("machine", {}).get("date", "")))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "performance.md")
    parser.add_argument("--json-dir", type=Path, default=DATA, help="where each script's claims file goes")
    parser.add_argument("--only", default=",".join(SCRIPTS), help=f"comma-separated, of {', '.join(SCRIPTS)}")
    parser.add_argument("--tiers", nargs="+", help="tiled_fused tiers to run (default: every tier this CPU has)")
    parser.add_argument("--rounds", type=int, help="passed to every script (default: each script's own)")
    parser.add_argument("--from-json", type=Path, nargs="+", help="write the tables from these files; run nothing")
    args = parser.parse_args(argv)
    if args.from_json:
        files = list(args.from_json)
    else:
        only = [n for n in args.only.split(",") if n]
        unknown = set(only) - set(SCRIPTS)
        if unknown:
            parser.error(f"unknown --only {', '.join(sorted(unknown))}; one of {', '.join(SCRIPTS)}")
        tiers = args.tiers or machine_tiers(cpu_flags())
        if os.getloadavg()[0] > (os.cpu_count() or 1):
            print(f"claims: load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs: other jobs share the cores, "
                  "so the figures will be noisy (each table records the load)", file=sys.stderr)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
        files = []
        for command, out in plan(only, tiers, args.json_dir, args.rounds):
            print("$ " + " ".join(command[1:]), flush=True)
            run = subprocess.run(command, cwd=ROOT, env=env)
            if run.returncode != 0:
                print(f"claims: {command[1]} exited {run.returncode}; its table is left out", file=sys.stderr)
                continue
            files.append(out)
        # a run of some scripts (--only, --tiers) refreshes their tables and keeps the others' files
        files = sorted(set(files) | set(args.json_dir.glob("*.json")))
    docs = load(files)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    partial = args.out.with_name(args.out.name + ".partial")
    partial.write_text(render(docs))
    os.replace(partial, args.out)  # never a half-written page
    print(f"claims: {len(docs)} table(s) written to {args.out}")
    return 0 if docs else 1


if __name__ == "__main__":
    sys.exit(main())
