"""Which machine a cell ran on: the identity a cluster cell carries, and the kind that groups machines.

Two cells are only ever compared (a speedup, a regression, a share of peak) when they ran on
the same *kind* of machine: same CPU model and core count, same GPU, same torch build. The
kind is a readable label built from those fields, so a report can print it as it is.
"""

from __future__ import annotations

import os
import platform
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import TypedDict


class NodeIdentity(TypedDict, total=False):
    """A machine's identity as a node sends it (the result file's ``node``, :class:`harness.results.Node`).
    A plain dict: it crosses the Ray boundary, and this core module does not know the result records."""

    hostname: str
    cpu_model: str
    cores: int | None
    gpu: str | None
    torch: str
    cuda: str | None
    kind: str
    node_id: str
    node_ip: str


def cpu_model() -> str:
    """The CPU's marketing name (``/proc/cpuinfo``), or what the platform module knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def kind_of(identity: Mapping[str, object]) -> str:
    """"AMD EPYC 9454P x2 / torch 2.13.0+cpu" (+ " / NVIDIA H100" with a GPU): what makes timings comparable."""
    parts = [f"{identity.get('cpu_model')} x{identity.get('cores')}"]
    if identity.get("gpu"):
        parts.append(str(identity["gpu"]))
    parts.append(f"torch {identity.get('torch')}")
    return " / ".join(parts)


_IDENTITY: NodeIdentity | None = None


def node_identity() -> NodeIdentity:
    """This process's machine: hostname, CPU, cores, GPU, torch build, the Ray node id when in a Ray
    worker, and the kind label. Computed once per process (it imports torch)."""
    global _IDENTITY
    if _IDENTITY is None:
        import torch

        identity: NodeIdentity = {
            "hostname": socket.gethostname(), "cpu_model": cpu_model(), "cores": os.cpu_count(),
            "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
            "torch": torch.__version__, "cuda": torch.version.cuda,
        }
        identity["kind"] = kind_of(identity)
        _IDENTITY = identity
    return {**_IDENTITY, **_ray_node()}


def _ray_node() -> NodeIdentity:
    """The Ray node id and address, when this process is a Ray worker (ray is imported there already)."""
    import sys

    if "ray" not in sys.modules:
        return {}
    import ray

    if not ray.is_initialized():
        return {}
    context = ray.get_runtime_context()
    return {"node_id": context.get_node_id(), "node_ip": ray.util.get_node_ip_address()}  # type: ignore[no-untyped-call]
