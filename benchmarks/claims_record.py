"""What a targets script writes with ``--claims FILE``: its measured figures beside their targets, and the
machine they came from, so that ``python3 -m benchmarks.claims`` can turn them into the tables of
docs/performance.md without anyone copying a number by hand.

A file (``FORMAT``)::

    {"format": "attnbench-claims/1", "title": "...", "command": "...",
     "machine": {"cpu": ..., "isa": ..., "cpu_flags": [...], "threads": 2, "torch": "2.13.0+cpu",
                 "load_before": [1.0, 0.9, 0.8], "load_after": [...], "date": "2026-11-25T17:00:00+00:00"},
     "rows": [{"claim": ..., "value": 2.12, "unit": "x", "target": ">= 2.0", "met": true,
               "detail": "...", "tier": "avx512_bf16"}]}

``met`` is null for a figure reported without a target. Only the standard library and torch (already
loaded by every script) are used here.
"""

from __future__ import annotations

import datetime
import json
import os
import shlex
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harness.runtime.cluster.node import cpu_model

FORMAT = "attnbench-claims/1"
FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16")
"""CPU features that decide which kernels run; the ones the machine has are recorded."""


def cpu_flags() -> list[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                have = set(line.split(":", 1)[1].split())
                return [f for f in FLAGS if f in have]
    except OSError:
        pass
    return []


def cpu_family_model() -> dict[str, int]:
    """The CPU's family and model numbers (``/proc/cpuinfo``): what tells an AMD Zen 4 (family 25) from a Zen 5
    (family 26) when both are called "AMD EPYC"; empty where they are not reported."""
    found: dict[str, int] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            key = key.strip()
            if key in ("cpu family", "model") and key not in found and value.strip().isdigit():
                found[key] = int(value)
            if len(found) == 2:
                break
    except OSError:
        pass
    return {"cpu_family": found["cpu family"], "cpu_model_number": found["model"]} if len(found) == 2 else {}


def cpu_heading() -> str:
    """"AMD EPYC (family 26, model 2; avx2, fma, avx512f, avx512_bf16)": the CPU a table of figures belongs to."""
    ids = cpu_family_model()
    where = f"family {ids['cpu_family']}, model {ids['cpu_model_number']}; " if ids else ""
    return f"{cpu_model()} ({where}{', '.join(cpu_flags()) or 'no AVX2/AVX-512'})"


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


@dataclass
class Row:
    claim: str
    value: float
    unit: str
    target: str
    met: bool | None
    detail: str = ""
    tier: str = ""
    reachable: float | None = None
    """Where a measured roof caps the figure below its target on this machine: the most that roof allows
    (same unit). The table then says the target is out of reach here instead of a plain miss."""


@dataclass
class Claims:
    """Collects a script's rows; ``write`` stamps the load average after and writes the file."""

    title: str
    isa: str
    rows: list[Row] = field(default_factory=list)
    machine: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        import torch

        self.machine = {"cpu": cpu_model(), **cpu_family_model(), "isa": self.isa, "cpu_flags": cpu_flags(),
                        "threads": torch.get_num_threads(), "torch": torch.__version__,
                        "aten_capability": torch.backends.cpu.get_cpu_capability(), "load_before": _load(),
                        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}

    def add(self, claim: str, value: float, unit: str, target: str, met: bool | None, detail: str = "",
            tier: str = "", reachable: float | None = None) -> None:
        self.rows.append(Row(claim, float(value), unit, target, met, detail, tier, reachable))

    def write(self, path: Path | str) -> None:
        doc = {"format": FORMAT, "title": self.title,
               "command": " ".join(shlex.quote(a) for a in [Path(sys.executable).name, *sys.argv]),
               "machine": {**self.machine, "load_after": _load()}, "rows": [asdict(r) for r in self.rows]}
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        target = Path(path)
        partial = target.with_name(target.name + ".partial")
        partial.write_text(json.dumps(doc, indent=1) + "\n")
        os.replace(partial, target)  # never a half-written claims file
