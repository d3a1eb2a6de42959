"""The report's numbers do not depend on which BLAS kernel the CPU gets.

OpenBLAS picks its kernel by CPU (SkylakeX on AVX-512, Haswell on AVX2; ``OPENBLAS_CORETYPE`` overrides it),
and kernels differ in their last floating-point digits. The report and fit tests run here again in fresh
processes under each kernel this CPU can execute, with no variable set (the kernel a fresh machine picks) and
with each named one, so a fit that lets those digits through (an ill-conditioned design matrix, an exponent
chosen by rounding noise) fails on this machine instead of on another one's.
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


def _kernels() -> list[str | None]:
    """None (OpenBLAS's own choice), then each named kernel this CPU runs."""
    flags = _cpu_flags()
    named = [k for k, needs in (("Haswell", "avx2"), ("SkylakeX", "avx512f")) if needs in flags]
    return [None, *named]


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
@pytest.mark.parametrize("kernel", _kernels(), ids=lambda k: k or "openblas-default")
def test_report_tests_pass_under_each_blas_kernel(kernel: str | None) -> None:
    pytest.importorskip("threadpoolctl")
    env = _environment(kernel)
    in_use = _kernel_in_use(env)
    if not in_use:
        pytest.skip("numpy does not use OpenBLAS here: no kernel to vary")
    if kernel is not None:
        assert in_use == kernel, f"OPENBLAS_CORETYPE={kernel} was not taken: OpenBLAS runs {in_use}"
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider",
                          "-o", "addopts=--benchmark-disable", *REPORT_TESTS],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, f"under OpenBLAS kernel {in_use}:\n{run.stdout[-4000:]}\n{run.stderr[-2000:]}"
