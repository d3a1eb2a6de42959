"""The CUDA check: every CUDA path of attnbench run for real on one GPU machine, one summary file.

Run by ``scripts/gpu_check.sh`` (which installs attnbench and its carried wheels first); see that file for
usage. Each step runs in its own process group with its own time limit, all inside one deadline
(``--deadline``, 440 s by default, the install included: the device tool gives a check 8 minutes); a step that fails, hangs
or is cut off is recorded and the next one runs. The summary (``summary.json``) is rewritten after
every step, so a check killed from outside still leaves what it measured. The steps that time nothing (the
C++ builds of ``list``, the verify runs) run side by side; every step that times runs alone after them.

Dry run (``--dry-run``, and always where torch sees no CUDA device): the same steps, their time limits and
their summaries, on CPU stand-ins (tiny shapes, ``--device cpu``); the steps that exist only on a GPU are
recorded as skipped with the reason. tests/test_gpu_check.py runs it.

What comes back from the device tool is at most 8 files, at most 2 folders down, so ``--out`` receives exactly
three: ``summary.json``, ``steps.log`` (every step's output, in order) and ``results.tar.gz`` (the raw verify,
bench and pytest result files).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEADLINE_S = 440.0
RESERVE_S = 12.0
"""Kept back from the last step for the summary, the archive and the device tool's transfers."""
MIN_STEP_S = 15.0
"""A step with less than this left is skipped (out of time) rather than started to be killed."""
SDPA_FAMILY = "torch_sdpa,torch_sdpa_math,torch_sdpa_flash,torch_sdpa_efficient,torch_sdpa_cudnn"
BENCH_IMPLS = "torch_sdpa,torch_sdpa_flash,tiled_triton"
CHEATS = ROOT / "tests" / "integrity" / "cuda_cheats.py"
STATUSES = ("ok", "failed", "timeout", "skipped", "error")


@dataclass
class Step:
    """One command of the check: its argv on a GPU, its CPU stand-in for a dry run (None: skipped there)."""

    name: str
    what: str
    argv: list[str]
    timeout_s: float
    dry_argv: list[str] | None = None
    result: str | None = None
    """The result file the step writes (in the work folder), read into the summary by ``read``."""
    read: Callable[[Path], dict[str, Any]] | None = None
    stdout_to_result: bool = False
    """The step prints its result (``list --json``): its stdout goes to the result file, its stderr to the log."""
    together: bool = False
    """It times nothing (builds, correctness): it runs at the same time as the steps next to it that say so too.
    Steps that time (events, peaks, bandwidth, targets) run alone, one after another."""


@dataclass
class Outcome:
    name: str
    what: str
    status: str
    seconds: float = 0.0
    rc: int | None = None
    reason: str | None = None
    command: str = ""
    findings: dict[str, Any] = field(default_factory=dict)


def _py(*args: str) -> list[str]:
    return [sys.executable, *args]


def _attnbench(*args: str) -> list[str]:
    return _py("-m", "harness", *args)


def steps(work: Path) -> list[Step]:
    """Every step, in the order they run: the builds and verify runs side by side (they time nothing), then each
    step that times, alone; the host CPU's decode targets last (the least needed where time runs short)."""
    def res(name: str) -> str:
        return str(work / name)

    bench_common = ["--budget", "0.1", "--min-samples", "5", "--timeout", "120", "--quiet"]
    return [
        Step("environment", "torch, CUDA, the GPU, Triton, xformers, the host CPU", _py("-c", ENV_SCRIPT), 60,
             _py("-c", ENV_SCRIPT)),
        # correctness and builds, side by side (16 cores and one GPU with room for all of them)
        Step("list", "attnbench list (builds the C++ kernels once)", _attnbench("list", "--json"), 200,
             _attnbench("list", "--json"), result="list.json", read=read_list, stdout_to_result=True, together=True),
        Step("verify_sdpa", "verify --suite small: SDPA and each pinned backend",
             _attnbench("verify", "--suite", "small", "--only", SDPA_FAMILY, "--jobs", "5", "--json", res("verify_sdpa.json")),
             150, _attnbench("verify", "--suite", "small", "--only", "torch_sdpa_math,torch_sdpa_cudnn",
                             "--json", res("verify_sdpa.json")),
             result="verify_sdpa.json", read=read_verify, together=True),
        Step("verify_triton", "verify --suite small: tiled_triton compiled by Triton",
             _attnbench("verify", "--suite", "small", "--only", "tiled_triton", "--jobs", "1", "--timeout", "120",
                        "--json", res("verify_triton.json")), 180,
             result="verify_triton.json", read=read_verify, together=True),
        Step("verify_flex", "verify --suite small: flex_attention compiled for the GPU",
             _attnbench("verify", "--suite", "small", "--only", "flex_attention", "--jobs", "1", "--timeout", "150",
                        "--json", res("verify_flex.json")), 180,
             result="verify_flex.json", read=read_verify, together=True),
        Step("verify_decode", "verify --suite small: tiled_decode (a CPU kernel, on the GPU machine's host CPU)",
             _attnbench("verify", "--suite", "small", "--only", "tiled_decode", "--json", res("verify_decode.json")),
             200, result="verify_decode.json", read=read_verify, together=True),
        # timing, one step at a time
        Step("sdpa_tflops", "SDPA's backends: TFLOP/s against the measured GEMM peak",
             _py("benchmarks/sdpa_cuda.py", "--json", res("sdpa.json")), 90,
             _py("benchmarks/sdpa_cuda.py", "--cpu", "--modes", "fwd", "--json", res("sdpa.json")),
             result="sdpa.json", read=read_sdpa),
        Step("integrity", "bench's integrity checks on CUDA cells: cheats flagged, honest kernels passed",
             _attnbench("bench", "--device", "cuda", "--plugin", str(CHEATS), "--only", ",".join(_cheats()),
                        "--T", "2048", "--d", "128", "--heads", "16", "--batch", "2", "--dtype", "bfloat16",
                        "--causal", "off", "--mode", "fwd", "--budget", "0.05", "--min-samples", "5", "--no-memory",
                        "--timeout", "90", "--quiet", "--out", res("integrity_cuda.json")), 100,
             _attnbench("bench", "--device", "cpu", "--plugin", str(CHEATS), "--only", ",".join(_cheats()),
                        "--T", "64", "--d", "32", "--heads", "2", "--batch", "1", "--dtype", "float32",
                        "--causal", "off", "--mode", "fwd", "--budget", "0.02", "--roof-budget", "0.01",
                        "--no-memory", "--quiet", "--out", res("integrity_cuda.json")),
             result="integrity_cuda.json", read=read_integrity),
        Step("bench", "bench on cuda: CUDA events, L2 flush, peak memory, GEMM peak, bandwidth",
             _attnbench("bench", "--device", "cuda", "--only", BENCH_IMPLS, "--T", "1024", "4096", "--d", "128",
                        "--heads", "16", "--batch", "4", "--dtype", "bfloat16", "--causal", "on",
                        "--mode", "fwd", "fwd+bwd", *bench_common, "--out", res("bench_cuda.json")), 200,
             _attnbench("bench", "--device", "cpu", "--only", "torch_sdpa", "--T", "64", "--d", "32", "--heads", "2",
                        "--batch", "1", "--dtype", "float32", "--causal", "off", "--mode", "fwd", "--budget", "0.02",
                        "--roof-budget", "0.01", "--min-samples", "3", "--quiet", "--out", res("bench_cuda.json")),
             result="bench_cuda.json", read=read_bench),
        Step("pytest_cuda", "the GPU-marked tests (pytest -m cuda)",
             _py("-m", "pytest", "-n", "0", "-q", "-m", "cuda", "-p", "no:cacheprovider", "tests/test_cuda.py",
                 "--junitxml", res("pytest_cuda.xml")), 90,
             _py("-m", "pytest", "-n", "0", "-q", "-m", "cuda", "-p", "no:cacheprovider", "tests/test_cuda.py",
                 "--junitxml", res("pytest_cuda.xml")),
             result="pytest_cuda.xml", read=read_junit),
        Step("decode_targets", "tiled_decode's targets on the host CPU, beside its measured in-cache roof",
             _py("benchmarks/decode_targets.py", "--no-sdpa", "--rounds", "3", "--claims", res("decode_claims.json")),
             90, result="decode_claims.json", read=read_claims),
    ]


def _cheats() -> list[str]:
    return list(_expected())


def _expected() -> dict[str, tuple[str, ...]]:
    namespace: dict[str, Any] = {}
    source = CHEATS.read_text()
    start = source.index("EXPECTED = {")
    exec(source[start:source.index("}\n", start) + 2], namespace)  # the literal only: no torch in the driver
    return dict(namespace["EXPECTED"])


ENV_SCRIPT = r"""
import json, os, platform, shutil, subprocess, sys
import torch
info = {"python": sys.version.split()[0], "torch": torch.__version__, "torch_cuda": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(), "host": platform.node(), "cpus": os.cpu_count()}
try:
    with open("/proc/cpuinfo") as f:
        lines = [l.split(":", 1) for l in f if ":" in l]
    first = {k.strip(): v.strip() for k, v in lines[:30]}
    info["cpu"] = {k: first.get(k) for k in ("model name", "cpu family", "model", "stepping")}
    flags = set(first.get("flags", "").split())
    info["cpu"]["avx512f"], info["cpu"]["amx_bf16"] = "avx512f" in flags, "amx_bf16" in flags
except OSError:
    pass
info["cpu_capability"] = torch.backends.cpu.get_cpu_capability()
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    info["gpu"] = {"name": p.name, "capability": f"{p.major}.{p.minor}", "sms": p.multi_processor_count,
                   "memory_gib": round(p.total_memory / 2**30, 1),
                   "l2_mib": round(getattr(p, "L2_cache_size", 0) / 2**20, 1)}
    info["cudnn"] = torch.backends.cudnn.version()
for name in ("triton", "xformers", "allpairspy", "hypothesis", "pytest"):
    try:
        info[name] = __import__(name).__dict__.get("__version__", "present")
    except Exception as exc:
        info[name] = f"absent: {type(exc).__name__}: {exc}"[:200]
if shutil.which("nvidia-smi"):
    q = "name,driver_version,memory.total,clocks.max.sm,power.limit"
    r = subprocess.run(["nvidia-smi", f"--query-gpu={q}", "--format=csv,noheader"], capture_output=True, text=True)
    info["nvidia_smi"] = r.stdout.strip() or r.stderr.strip()
print(json.dumps(info))
"""


# ------------------------------------------------------------------ reading the result files

def _load(path: Path) -> Any:
    return json.loads(path.read_text())


def read_list(path: Path) -> dict[str, Any]:
    """Each implementation's devices and availability here (the reason where it is not available)."""
    doc = _load(path)
    return {"implementations": {i["name"]: {"devices": i.get("devices"), "available": i.get("available"),
                                            "reason": (i.get("reason") or None) and str(i["reason"])[:300]}
                                for i in doc.get("implementations", [])},
            "load_errors": doc.get("load_errors")}


def read_verify(path: Path) -> dict[str, Any]:
    """Per implementation and device: the count of each status, and the first few failures with their reasons."""
    doc = _load(path)
    counts: dict[str, Counter[str]] = {}
    failures: list[dict[str, Any]] = []
    skipped: dict[str, str] = {}
    for cell in doc.get("cells", []):
        key = f"{cell.get('implementation')}/{(cell.get('case') or {}).get('device', '?')}"
        counts.setdefault(key, Counter())[str(cell.get("status"))] += 1
        if cell.get("status") == "skipped":
            skipped.setdefault(key, str(cell.get("reason"))[:300])
        elif cell.get("status") != "pass" and len(failures) < 12:
            failures.append({"implementation": cell.get("implementation"), "case": cell.get("case_id"),
                             "check": cell.get("check"), "status": cell.get("status"),
                             "reason": str(cell.get("reason"))[:400]})
    return {"complete": doc.get("complete"), "counts": {k: dict(v) for k, v in sorted(counts.items())},
            "failures": failures, "skipped_because": skipped}


def _cell_row(cell: dict[str, Any], peaks: dict[str, Any]) -> dict[str, Any]:
    stats = cell.get("stats") or {}
    integrity = cell.get("integrity") or {}
    floor = integrity.get("floor") or {}
    checked = integrity.get("checked") or []
    peak = (peaks.get(cell.get("peak_key") or "") or {}).get("gflops")
    memory = cell.get("memory") or {}
    return {"implementation": cell.get("implementation"), "case": cell.get("case_id"), "mode": cell.get("mode"),
            "status": cell.get("status"), "reason": (str(cell["reason"])[:300] if cell.get("reason") else None),
            "median_ms": 1e3 * stats["median"] if stats.get("median") else None,
            "tflops": (cell.get("gflops") or 0) / 1e3 or None,
            "pct_of_peak": 100 * cell["gflops"] / peak if peak and cell.get("gflops") else None,
            "peak_extra_mib": memory.get("peak_extra_bytes") / 2**20 if memory.get("peak_extra_bytes") is not None else None,
            "memory_method": memory.get("method"), "samples": len(cell.get("samples_s") or []),
            "floor_us": 1e6 * floor["floor_s"] if floor.get("floor_s") else None,
            "input_sets": integrity.get("input_sets"), "shifted": integrity.get("shifted"),
            "checked": [{k: c.get(k) for k in ("sample", "set", "rows", "max_abs_err", "bound", "checked")
                         if c.get(k) is not None} for c in checked][:2]}


def read_bench(path: Path) -> dict[str, Any]:
    doc = _load(path)
    peaks = doc.get("peaks") or {}
    cells = [_cell_row(c, peaks) for c in doc.get("cells", [])]
    return {"complete": doc.get("complete"),
            "peaks_tflops": {k: (v or {}).get("gflops", 0) / 1e3 for k, v in peaks.items()},
            "peak_methods": {k: (v or {}).get("method") or (v or {}).get("error") for k, v in peaks.items()},
            "bandwidth_gbps": {k: {"read": (v or {}).get("read_gbps"), "copy": (v or {}).get("copy_gbps")}
                               for k, v in (doc.get("bandwidth") or {}).items()},
            "statuses": dict(Counter(c["status"] for c in cells)), "cells": cells}


def read_integrity(path: Path) -> dict[str, Any]:
    """Each plugin's verdict against the verdicts that count as right for it."""
    bench = read_bench(path)
    expected = _expected()
    verdicts = {}
    for cell in bench["cells"]:
        name = str(cell["implementation"])
        want = expected.get(name, ())
        verdicts[name] = {"status": cell["status"], "expected": list(want), "as_expected": cell["status"] in want,
                          "median_ms": cell["median_ms"], "reason": cell["reason"], "checked": cell["checked"]}
    side, honest = verdicts.get("cuda_side_stream", {}), verdicts.get("cuda_honest", {})
    ratio = (side["median_ms"] / honest["median_ms"]) if side.get("median_ms") and honest.get("median_ms") else None
    return {"all_as_expected": bool(verdicts) and all(v["as_expected"] for v in verdicts.values()),
            "side_stream_over_honest_time": ratio, "verdicts": verdicts,
            "peaks_tflops": bench["peaks_tflops"]}


def read_sdpa(path: Path) -> dict[str, Any]:
    rows = _load(path)
    machine = next((r for r in rows if r.get("what") == "machine"), {})
    return {"machine": machine, "backends": [r for r in rows if r.get("what") == "sdpa"]}


def read_claims(path: Path) -> dict[str, Any]:
    """A targets script's claims file (benchmarks/claims_record.py): its machine and each figure's verdict. Copy
    it to docs/claims/ to add that machine's table to docs/performance.md."""
    doc = _load(path)
    return {"machine": doc.get("machine"), "rows": [{k: r.get(k) for k in ("claim", "tier", "value", "target", "met",
                                                                           "reachable", "detail")}
                                                    for r in doc.get("rows", [])]}


def read_junit(path: Path) -> dict[str, Any]:
    root = ET.parse(path).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    if suite is None:
        return {}
    cases = []
    for case in suite.iter("testcase"):
        outcome = "passed"
        for tag in ("failure", "error", "skipped"):
            node = case.find(tag)
            if node is not None:
                outcome = tag
                cases.append({"test": case.get("name"), "outcome": tag, "message": (node.get("message") or "")[:300]})
                break
        else:
            cases.append({"test": case.get("name"), "outcome": outcome})
    return {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")} | {"cases": cases}


# ------------------------------------------------------------------ running

@dataclass
class Running:
    """A started step: its process (a group of its own), when it started and its limit."""

    proc: subprocess.Popen[bytes]
    started: float
    limit_s: float


def start_step(step: Step, argv: list[str], limit_s: float, log: Any, env: dict[str, str]) -> Running | str:
    """Start one step in a process group of its own, its output to ``log``; the reason when it cannot start."""
    log.write(f"\n===== {step.name}: {' '.join(argv)} (limit {limit_s:.0f} s)\n")
    log.flush()
    stdout: Any = log
    try:
        if step.stdout_to_result and step.result:
            stdout = open(Path(env["ATTNBENCH_GPU_CHECK_WORK"]) / step.result, "w")
        proc = subprocess.Popen(argv, cwd=ROOT, stdout=stdout, stderr=log if stdout is not log else subprocess.STDOUT,
                                env=env, start_new_session=True)
    except OSError as exc:
        return f"could not start: {exc}"
    finally:
        if stdout is not log:
            stdout.close()  # the child holds its own descriptor
    return Running(proc, time.time(), limit_s)


def finish_step(running: Running) -> tuple[str, int | None, str | None]:
    """Wait for a started step until its limit; past it the whole group is ended (TERM, then KILL)."""
    proc = running.proc
    try:
        rc = proc.wait(timeout=max(0.0, running.started + running.limit_s - time.time()))
    except subprocess.TimeoutExpired:
        for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
            try:
                proc.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue
        return "timeout", None, f"cut off at its limit of {running.limit_s:.0f} s"
    return ("ok" if rc == 0 else "failed"), rc, None if rc == 0 else f"exit status {rc}"


def run_step(step: Step, argv: list[str], limit_s: float, log: Any, env: dict[str, str]) -> tuple[str, int | None, str | None]:
    """Run one step to its end or its limit: (status, exit status, reason)."""
    running = start_step(step, argv, limit_s, log, env)
    if isinstance(running, str):
        return "error", None, running
    return finish_step(running)


def batches(chosen: list[Step]) -> list[list[Step]]:
    """The steps in runs: consecutive ``together`` steps in one run, every other step in a run of its own."""
    out: list[list[Step]] = []
    for step in chosen:
        if step.together and out and out[-1][0].together:
            out[-1].append(step)
        else:
            out.append([step])
    return out


def _write_json(path: Path, doc: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1, default=str))
    tmp.replace(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or ROOT / "results" / "gpu_check"))
    parser.add_argument("--dry-run", action="store_true", help="the CPU stand-ins, even where a GPU is present")
    parser.add_argument("--deadline", type=float, default=DEADLINE_S, help="seconds for every step together")
    parser.add_argument("--steps", help="comma-separated step names to run (default: all)")
    parser.add_argument("--started", type=float, default=None, help="epoch seconds the check began (the .sh's install)")
    parser.add_argument("--install", default="", help="how the install went (from the .sh)")
    args = parser.parse_args(argv)
    started = args.started or time.time()
    cuda, cuda_why = _cuda_here()
    dry = args.dry_run or not cuda
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    names = [s.name for s in steps(Path("work"))]
    wanted = set(args.steps.split(",")) if args.steps else None
    if wanted and wanted - set(names):
        parser.error(f"unknown step(s) {sorted(wanted - set(names))}; steps: {', '.join(names)}")
    work = Path(tempfile.mkdtemp(prefix="attnbench-gpu-check-"))
    all_steps = steps(work)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "MAX_JOBS": str(os.cpu_count() or 2),
           "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)}
    env["ATTNBENCH_GPU_CHECK_WORK"] = str(work)
    env.pop("TRITON_INTERPRET", None)  # Triton must compile for the GPU here
    summary: dict[str, Any] = {
        "mode": "dry-run" if dry else "cuda", "why_dry": None if not dry else ("--dry-run" if args.dry_run else cuda_why),
        "deadline_s": args.deadline, "install": args.install, "steps": [], "files": ["summary.json", "steps.log", "results.tar.gz"],
    }
    chosen = [step for step in all_steps if wanted is None or step.name in wanted]
    done: dict[str, Outcome] = {}
    with open(out / "steps.log", "w") as log:
        for batch in batches(chosen):
            running: dict[str, tuple[Outcome, Running | str, Any]] = {}
            for step in batch:
                argv_ = step.dry_argv if dry else step.argv
                outcome = Outcome(step.name, step.what, "skipped", command=" ".join(argv_ or []))
                left = args.deadline - (time.time() - started) - RESERVE_S
                if argv_ is None:
                    outcome.reason = "dry run: this step needs a CUDA device (no CPU stand-in)"
                elif left < MIN_STEP_S:
                    outcome.reason = f"out of time: {max(left, 0):.0f} s left of the {args.deadline:.0f} s deadline"
                else:  # a step beside others writes a log of its own, added to steps.log when it is done
                    own = log if len(batch) == 1 else open(work / f"{step.name}.log", "w")
                    running[step.name] = (outcome, start_step(step, argv_, min(step.timeout_s, left), own, env), own)
                done[step.name] = outcome
            for name, (outcome, started_step, own) in running.items():
                if isinstance(started_step, str):
                    outcome.status, outcome.reason = "error", started_step
                else:
                    outcome.status, outcome.rc, outcome.reason = finish_step(started_step)
                    outcome.seconds = round(time.time() - started_step.started, 1)
                if own is not log:
                    own.close()
                    log.write(Path(own.name).read_text(errors="replace"))
                    log.flush()
                    Path(own.name).unlink()
                outcome.findings = _findings(next(s for s in batch if s.name == name), work, log)
            summary["steps"] = [asdict(done[s.name]) for s in chosen if s.name in done]
            summary["elapsed_s"] = round(time.time() - started, 1)
            _write_json(out / "summary.json", summary)
    outcomes = [done[s.name] for s in chosen]
    with tarfile.open(out / "results.tar.gz", "w:gz") as tar:
        for path in sorted(work.iterdir()):
            tar.add(path, arcname=path.name)
    shutil.rmtree(work, ignore_errors=True)
    summary["elapsed_s"] = round(time.time() - started, 1)
    _write_json(out / "summary.json", summary)
    print(table(summary))
    return 0 if all(o.status in ("ok", "skipped") for o in outcomes) else 1


def _cuda_here() -> tuple[bool, str]:
    """Whether torch sees a CUDA device, asked in a child process (the driver itself never initialises CUDA)."""
    probe = "import torch; print(torch.cuda.is_available(), torch.__version__)"
    try:
        r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"could not ask torch: {exc}"
    words = r.stdout.split()
    if r.returncode or not words:
        return False, f"torch did not import: {r.stderr.strip()[-300:]}"
    return words[0] == "True", f"torch {words[-1]} sees no CUDA device"


def _findings(step: Step, work: Path, log: Any) -> dict[str, Any]:
    if step.name == "environment":
        return _last_json_line(Path(log.name), step.name)
    if step.read is None or step.result is None:
        return {}
    path = work / step.result
    if not path.exists():
        return {"missing": f"{step.result} was not written"}
    try:
        return step.read(path)
    except Exception as exc:  # noqa: BLE001 - a result file the step left half-written is itself a finding
        return {"unreadable": f"{step.result}: {type(exc).__name__}: {exc}"}


def _last_json_line(log_path: Path, name: str) -> dict[str, Any]:
    text = log_path.read_text(errors="replace")
    part = text[text.rfind(f"===== {name}:"):]
    for line in reversed(part.splitlines()):
        if line.startswith("{"):
            with contextlib.suppress(json.JSONDecodeError):
                return dict(json.loads(line))
    return {}


def table(summary: dict[str, Any]) -> str:
    """The closing lines: one per step, then the figures the check measures."""
    lines = [f"gpu_check ({summary['mode']}; {summary['elapsed_s']} s of {summary['deadline_s']:.0f})"]
    for s in summary["steps"]:
        lines.append(f"  {s['name']:<15} {s['status']:<8} {s['seconds']:>6.1f} s  {s['reason'] or ''}")
    for s in summary["steps"]:
        f = s["findings"]
        if s["name"] == "environment" and f:
            lines.append(f"  gpu: {f.get('gpu')}; torch {f.get('torch')}; triton {f.get('triton')}; cpu: {f.get('cpu')}")
        if s["name"] == "sdpa_tflops" and f.get("machine"):
            m = f["machine"]
            lines.append(f"  {m.get('name')}: GEMM peak {m.get('gemm_peak_tflops', 0):.1f} TFLOP/s, read "
                         f"{m.get('read_gbps', 0):.0f} GB/s, empty call {m.get('empty_call_us', 0):.1f} us")
            for b in f["backends"]:
                lines.append(f"    {b['backend']:<20} causal={b['causal']!s:<5} {b['mode']:<8} " + (
                    f"{b['tflops']:.1f} TFLOP/s = {b['pct_of_gemm_peak']:.0f}% of peak" if "tflops" in b
                    else f"refused: {b.get('error', '')[:90]}"))
        if s["name"].startswith("verify") and f.get("counts"):
            for key, counts in f["counts"].items():
                lines.append(f"    {key:<32} {counts}")
        if s["name"] == "integrity" and f.get("verdicts"):
            lines.append(f"    all as expected: {f['all_as_expected']}; side stream / honest time: "
                         f"{f['side_stream_over_honest_time']}")
            for name, v in f["verdicts"].items():
                lines.append(f"    {name:<20} {v['status']:<12} expected {'|'.join(v['expected'])}")
        if s["name"] == "bench" and f.get("statuses"):
            lines.append(f"    cells: {f['statuses']}; peaks {f['peaks_tflops']} TFLOP/s")
        if s["name"] == "decode_targets" and f.get("rows"):
            lines.append(f"    cpu: {(f.get('machine') or {}).get('cpu')} family {(f.get('machine') or {}).get('cpu_family')} "
                         f"model {(f.get('machine') or {}).get('cpu_model_number')}")
            for r in f["rows"]:
                lines.append(f"    {r['tier']:<7} {r['claim'][:60]:<60} {r['value']:.0f} ({r['target']}) "
                             f"met={r['met']} reachable={r['reachable']}")
        if s["name"] == "pytest_cuda" and "tests" in f:
            lines.append(f"    tests {f['tests']}, failures {f['failures']}, errors {f['errors']}, skipped {f['skipped']}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
