"""`attnbench verify` runs module cases beside kernel cases, in one table and one result file."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

import harness.verify.runner  # noqa: F401  (attnbench's own module: a failure to import is a failure)

pytestmark = pytest.mark.slow  # subprocesses and workers that import torch: not in the inner loop

WRONG_PLUGIN = textwrap.dedent('''
    import numpy as np
    from harness import register_module
    from implementations.module_numpy_mha import numpy_multihead_attention


    @register_module("mask_inverted", backend="numpy", mask=True, causal=True)
    def mask_inverted(x, *, heads, weights, mask=None, causal=False):
        """Treats True as padding (nn.MultiheadAttention's convention) instead of a real token."""
        return numpy_multihead_attention(x, heads=heads, weights=weights, causal=causal,
                                         mask=None if mask is None else ~mask)
''')


SMALL = ("verify", "--suite", "small", "--trials", "1", "--jobs", "1")


def test_module_and_kernel_cases_in_one_run(tmp_path: Path, attnbench) -> None:
    out = tmp_path / "run.json"
    run = attnbench(*SMALL, "--only", "numpy_mha,numpy_naive", "--json", str(out))
    assert run.returncode == 0, run.stdout + run.stderr
    rows = {line.split()[0]: line.split()[1] for line in run.stdout.splitlines() if line.startswith("numpy_")}
    assert rows == {"numpy_mha": "module", "numpy_naive": "kernel"}
    cells = json.loads(out.read_text())["cells"]
    module_cells = [c for c in cells if c["implementation"] == "numpy_mha"]
    assert module_cells and all(c["case"]["kind"] == "module" and c["status"] == "pass" for c in module_cells)
    assert {c["check"] for c in module_cells} == {"output", "property:mask"}


def test_an_inverted_mask_module_fails_the_run(tmp_path: Path, attnbench) -> None:
    plugin = tmp_path / "wrong.py"
    plugin.write_text(WRONG_PLUGIN)
    run = attnbench(*SMALL, "--plugin", str(plugin), "--only", "mask_inverted", "--json", str(tmp_path / "run.json"))
    assert run.returncode == 1, run.stdout + run.stderr
    assert "FAIL" in run.stdout and "mask=key_padding" in run.stdout
