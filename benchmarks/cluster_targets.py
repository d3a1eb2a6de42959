"""Targets for ``--executor ray``, on a two-node Ray cluster started on the local machine.

    python3 benchmarks/cluster_targets.py [--suite quick] [--only NAMES] [--skip-verify] [--skip-bench]

The cluster is ``ray.cluster_utils.Cluster`` on 127.0.0.1: a head with 0 CPUs and two nodes of one
CPU each with ``{"attnbench_node": 1}``, shut down at the end.

1. (untimed: ``verify --suite small --only tiled_fused`` on the cluster, which builds its C++ extension
   on the nodes) ``attnbench verify --suite quick`` on the cluster and with the local executor at the same
   parallelism (``--jobs 2``: two workers), one after the other: identical statuses per
   (implementation, case, check)? the wall-time ratio ray / local.
2. ``attnbench bench`` of 24 cells (numpy_naive, torch_sdpa, tiled x T 256..2048 x causal on/off,
   ``--threads 1``) on the cluster: each cell's node, and whether two timing cells ever held one node
   at the same time (their recorded ``started_at``/``ended_at``).

The load average is printed before and after each step: on a shared machine the ratio moves with it.
Nothing here asserts anything: these are targets to report, not tests.
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

from ray.cluster_utils import Cluster

from benchmarks.measuring import load_average
from harness.results import read_run


def _attnbench(*argv: str) -> float:
    print(f"$ attnbench {' '.join(argv)}   [{load_average()}]", flush=True)
    started = time.perf_counter()
    code = subprocess.run([sys.executable, "-m", "harness", *argv], stdout=subprocess.DEVNULL).returncode
    seconds = time.perf_counter() - started
    print(f"  exit {code}, {seconds:.1f} s   [{load_average()}]", flush=True)
    return seconds


def verify_target(address: str, out: Path, suite: str, only: list[str], local_first: bool) -> None:
    selection = [arg for name in only for arg in ("--only", name)]
    seconds = {}
    for name in ("local", "ray") if local_first else ("ray", "local"):
        where = ["--executor", "ray", "--address", address] if name == "ray" else ["--jobs", "2"]
        seconds[name] = _attnbench("verify", "--suite", suite, *selection, *where, "--json", str(out / f"verify-{name}.json"))
    ray_s, local_s = seconds["ray"], seconds["local"]
    runs = [read_run(out / f"verify-{name}.json") for name in ("ray", "local")]
    statuses = [{(c.implementation, c.case_id, c.check): c.status.value for c in run.verify_cells()} for run in runs]
    differ = {k for k in statuses[0].keys() | statuses[1].keys() if statuses[0].get(k) != statuses[1].get(k)}
    nodes = collections.Counter((c.node or {}).get("node_id", "-")[:8] for c in runs[0].verify_cells())
    print(f"verify: {len(statuses[0])} checks on ray, {len(statuses[1])} local; {len(differ)} differ"
          + (f" (e.g. {sorted(differ)[:5]})" if differ else "; statuses identical"))
    print(f"  checks per node: {dict(nodes)}")
    print(f"  wall time: ray {ray_s:.1f} s, local --jobs 2 {local_s:.1f} s, ratio ray/local {ray_s / local_s:.2f}")


def bench_target(address: str, out: Path) -> None:
    path = out / "bench-ray.json"
    _attnbench("bench", "--only", "numpy_naive,torch_sdpa,tiled", "--T", "256", "512", "1024", "2048", "--causal", "both",
               "--threads", "1", "--budget", "0.2", "--no-memory", "--executor", "ray", "--address", address,
               "--out", str(path))
    run = read_run(path)
    spans: dict[str, list[tuple[float, float, str]]] = collections.defaultdict(list)
    for cell in run.bench_cells():
        if cell.node is not None and cell.started_at is not None and cell.ended_at is not None:
            spans[cell.node.node_id or ""].append((cell.started_at, cell.ended_at, f"{cell.implementation} {cell.case_id}"))
    overlaps = []
    for node, cells in spans.items():
        cells.sort()
        overlaps += [(node[:8], a[2], b[2]) for a, b in zip(cells, cells[1:]) if b[0] < a[1]]
    statuses = collections.Counter(c.status.value for c in run.bench_cells())
    print(f"bench: {len(run.bench_cells())} cells {dict(statuses)}; with a node: {sum(len(v) for v in spans.values())}; "
          f"per node: { {n[:8]: len(v) for n, v in spans.items()} }; overlapping pairs on one node: {len(overlaps)}")
    for key, peak in run.peaks.items():
        print(f"  peak {key}: {peak.gflops or 0:.1f} GFLOP/s (first {peak.first_gflops or 0:.1f}, "
              f"again {peak.confirmed_gflops or 0:.1f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", default="quick")
    parser.add_argument("--only", action="append", default=[])
    parser.add_argument("--skip-verify", action="store_true")
    parser.add_argument("--skip-bench", action="store_true")
    parser.add_argument("--local-first", action="store_true", help="time the local run before the cluster run")
    args = parser.parse_args()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False,
                                                            "node_ip_address": "127.0.0.1"})
    try:
        for _ in range(2):
            cluster.add_node(num_cpus=1, resources={"attnbench_node": 1}, node_ip_address="127.0.0.1",
                             include_dashboard=False)
        cluster.wait_for_nodes()
        out = Path(tempfile.mkdtemp(prefix="attnbench-cluster-targets-"))
        print(f"cluster at {cluster.address}; result files in {out}; {os.cpu_count()} cores", flush=True)
        if not args.skip_verify and (not args.only or any("tiled_fused" in o for o in args.only)):
            # first use on the nodes builds tiled_fused's C++ extension for their copy of the sources (minutes,
            # once per cluster session): done here, untimed, so that both timed runs find their builds cached
            _attnbench("verify", "--suite", "small", "--only", "tiled_fused", "--executor", "ray", "--address",
                       cluster.address, "--json", str(out / "warm-up.json"))
        if not args.skip_verify:
            verify_target(cluster.address, out, args.suite, args.only, args.local_first)
        if not args.skip_bench:
            bench_target(cluster.address, out)
    finally:
        cluster.shutdown()


if __name__ == "__main__":
    main()
