"""Wall time and CPU seconds of one ``attnbench verify`` run, workers included, with the load beside them.

``time`` counts the command's own process and the children it reaps; verify's case workers are started by a
forkserver and their CPU never reaches it. This runs the command, samples utime + stime of every process in its
tree every 0.2 s (each process's last sample counts), and prints wall seconds, CPU seconds, the CPU model and
the load average before and after. A process living under 0.2 s may be missed: the CPU figure is a lower bound.

    PYTHONPATH=$PWD python3 benchmarks/verify_suite_cpu.py python3 -m harness verify --suite quick --json /tmp/q.json
"""
from __future__ import annotations

import os
import subprocess
import sys
import time

from harness.runtime.cluster.node import cpu_model

TICKS = os.sysconf("SC_CLK_TCK")


def _tree_cpu(root: int) -> dict[int, float]:
    """CPU seconds of ``root`` and each of its descendants now."""
    parent_of: dict[int, int] = {}
    cpu: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # it ended between listdir and open
        parent_of[int(entry)] = int(fields[1])
        cpu[int(entry)] = (int(fields[11]) + int(fields[12])) / TICKS
    tree = {pid: seconds for pid, seconds in cpu.items() if _descends(pid, root, parent_of)}
    return tree


def _descends(pid: int, root: int, parent_of: dict[int, int]) -> bool:
    while pid not in (root, 0, 1):
        pid = parent_of.get(pid, 0)
    return pid == root


def main() -> int:
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    load_before = os.getloadavg()
    started = time.perf_counter()
    process = subprocess.Popen(sys.argv[1:])
    last: dict[int, float] = {}
    while process.poll() is None:
        last.update(_tree_cpu(process.pid))
        time.sleep(0.2)
    wall = time.perf_counter() - started
    cpu = sum(last.values())
    print(f"exit {process.returncode}; wall {wall:.1f} s; CPU {cpu:.1f} s over {len(last)} processes "
          f"(sampled, a lower bound); {os.cpu_count()} CPUs, {cpu_model()}; load before "
          f"{' '.join(f'{x:.1f}' for x in load_before)}, after {' '.join(f'{x:.1f}' for x in os.getloadavg())}",
          file=sys.stderr)
    return process.returncode


if __name__ == "__main__":
    sys.exit(main())
