"""bench gives every implementation fresh workers: one plugin's process state never reaches the next."""

from __future__ import annotations

from pathlib import Path

import pytest
from gates import finish

from harness.results import load_results

pytestmark = pytest.mark.slow  # subprocesses and workers that import torch: not in the inner loop

PLUGINS = '''
import numpy as np
import torch
from harness import register


def _attend(q, k, v, scale):
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    return torch.softmax((q @ k.transpose(-1, -2)) * scale, dim=-1) @ v


@register("poisoner", backend="torch")
def poisoner(q, k, v, *, causal=False, mask=None, scale=None):
    torch.set_default_dtype(torch.float64)   # global state a careless plugin leaves behind
    np.seterr(all="raise")
    torch.set_num_threads(1)
    return _attend(q, k, v, scale)


@register("observer", backend="torch")
def observer(q, k, v, *, causal=False, mask=None, scale=None):
    if torch.get_default_dtype() != torch.float32:
        raise RuntimeError(f"saw torch default dtype {torch.get_default_dtype()}")
    if np.geterr()["over"] != "warn":
        raise RuntimeError(f"saw numpy error mode {np.geterr()}")
    return _attend(q, k, v, scale)
'''


def test_a_plugin_that_changes_global_state_does_not_change_the_next_ones_cells(tmp_path: Path, attnbench) -> None:
    plugin = tmp_path / "stateful.py"
    plugin.write_text(PLUGINS)
    out = tmp_path / "run.json"
    code, _, err = finish(attnbench.start("bench", "--plugin", str(plugin), "--only", "poisoner,observer", "--T", "16", "32",
                                    "--heads", "1", "--d", "8",
                                    "--roof-budget", "0.01", "--budget", "0.01", "--min-samples", "2", "--quiet",
                                    "--threads", "2", "--out", str(out)))
    cells = load_results(out)["cells"]
    # timed in rounds, case by case: each case's two cells side by side, each implementation in its own workers;
    # the poisoner's own cells are violations (a call may not leave global state changed: docs/integrity.md), the
    # observer's are untouched by it
    statuses = sorted((c["implementation"], c["status"]) for c in cells)
    assert statuses == [("observer", "ok")] * 2 + [("poisoner", "violation")] * 2, err
    assert all("thread count (2 -> 1)" in c["reason"] for c in cells if c["implementation"] == "poisoner")
    assert all(c["rounds"]["contenders"] == 2 for c in cells)
    assert code == 1
    assert {c["threads"] for c in cells if c["implementation"] == "observer"} == {2}
    assert all(c["memory"]["peak_extra_bytes"] is not None for c in cells)


CHECKED = '''
import numpy as np
from harness import register


def _available(case):
    return None


@register("checked", backend="numpy", available=_available)
def checked(q, k, v, *, causal=False, mask=None, scale=None):
    s = q @ np.swapaxes(k, -1, -2) * (q.shape[-1] ** -0.5 if scale is None else scale)
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True) @ v).astype(q.dtype)
'''


@pytest.mark.parametrize("rounds", ["1", "3"])
def test_an_available_check_in_the_timing_worker_leaves_the_timed_task_its_own_clock(tmp_path: Path,
                                                                                     rounds: str, attnbench) -> None:
    """The ``available=`` check is the first task of the implementation's timing worker; the worker must still be
    warmed up (torch and the bench modules imported) before the first timed task: the imports are no call's time,
    and an honest cell is ``ok`` with every sample on the parent's clock."""
    plugin = tmp_path / "checked_plugin.py"
    plugin.write_text(CHECKED)
    out = tmp_path / "b.json"
    code, _, err = attnbench.outcome("bench", "--only", "checked", "--T", "16", "--heads", "1", "--d", "8",
                                     "--roof-budget", "0.01", "--budget", "0.01", "--min-samples", "2", "--no-memory", "--quiet",
                                     "--threads", "1", "--rounds", rounds, "--plugin", str(plugin), "--out", str(out))
    cell = load_results(out)["cells"][0]
    assert code == 0 and cell["status"] == "ok", (cell.get("reason"), err)
    stamps = cell["integrity"]["stamps"]
    assert stamps["calls"] == len(cell["samples_s"]) and max(cell["samples_s"]) < cell["integrity"]["wall_s"]
