"""The report's numbers do not depend on which BLAS kernel the CPU gets.

OpenBLAS picks its kernel by CPU (SkylakeX on AVX-512, Haswell on AVX2; ``OPENBLAS_CORETYPE`` overrides it),
and kernels differ in their last floating-point digits. The report and fit tests run here again in fresh
processes under each kernel this CPU can execute, with no variable set (the kernel a fresh machine picks) and
with each named one, so a fit that lets those digits through (an ill-conditioned design matrix, an exponent
chosen by rounding noise) fails on this machine instead of on another one's. Each kernel runs them once: a named
kernel that is also the one picked with no variable set (Haswell on an AMD EPYC with AVX-512, for one) is run as
that, after the variable naming it is checked to be taken.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
REPORT_TESTS = ("tests/schema/test_schema_v1.py", "tests/test_report_fits.py")


def _cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    line = next((ln for ln in text.splitlines() if ln.startswith("flags")), "")
    return set(line.partition(":")[2].split())


def _named_kernels() -> list[str]:
    """Each kernel this CPU runs that OPENBLAS_CORETYPE can name."""
    flags = _cpu_flags()
    return [k for k, needs in (("Haswell", "avx2"), ("SkylakeX", "avx512f")) if needs in flags]


def _environment(kernel: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENBLAS_")}
    if kernel is not None:
        env["OPENBLAS_CORETYPE"] = kernel
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return env


def _kernel_in_use(env: dict[str, str]) -> str:
    probe = ("import json, numpy, threadpoolctl; print(json.dumps([i.get('architecture') for i in "
             "threadpoolctl.threadpool_info() if i.get('internal_api') == 'openblas']))")
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120, check=True)
    found = json.loads(out.stdout)
    return str(found[0]) if found else ""


@pytest.mark.slow
@pytest.mark.skipif(not _cpu_flags(), reason="no /proc/cpuinfo: this test names x86 OpenBLAS kernels")
def test_report_tests_pass_under_each_blas_kernel() -> None:
    pytest.importorskip("threadpoolctl")
    default = _kernel_in_use(_environment(None))
    if not default:
        pytest.skip("numpy does not use OpenBLAS here: no kernel to vary")
    runs: dict[str, str | None] = {default: None}  # each kernel once -> the OPENBLAS_CORETYPE that selects it
    for kernel in _named_kernels():
        in_use = _kernel_in_use(_environment(kernel))
        assert in_use == kernel, f"OPENBLAS_CORETYPE={kernel} was not taken: OpenBLAS runs {in_use}"
        runs.setdefault(kernel, kernel)
    failed = []
    for kernel, variable in runs.items():
        run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider",
                              "-o", "addopts=--benchmark-disable", *REPORT_TESTS],
                             cwd=ROOT, env=_environment(variable), capture_output=True, text=True, timeout=900)
        if run.returncode != 0:
            chosen = "no variable set" if variable is None else f"OPENBLAS_CORETYPE={variable}"
            failed.append(f"under OpenBLAS kernel {kernel} ({chosen}):\n{run.stdout[-4000:]}\n{run.stderr[-2000:]}")
    assert not failed, "\n\n".join(failed)
