"""What a plugin does at import stays with that plugin: its process state, its exit, its writes to fd 1.

Each test runs the real command in a child process: what is tested is what reaches other
implementations' workers, the exit status and the bytes on stdout.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from gates import BOUND_S, finish

from harness.results import load_results

pytestmark = pytest.mark.slow  # subprocesses and workers that import torch: not in the inner loop

BAD_IMPORT = '''
import os

import numpy as np
import torch

from harness import register

np.seterr(all="raise")                    # process state changed at import, not in a call
torch.set_default_dtype(torch.float64)
torch.set_num_threads(1)
os.environ["ATTNBENCH_PROBE_LEAK"] = "set by badimport at import"


@register("badimport", backend="torch")
def badimport(q, k, v, *, causal=False, mask=None, scale=None):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
'''

OBSERVER = '''
import os

import numpy as np
import torch

from harness import register


@register("observer", backend="numpy")
def observer(q, k, v, *, causal=False, mask=None, scale=None):
    seen = []
    if np.geterr()["under"] != "ignore" or np.geterr()["over"] != "warn":
        seen.append(f"numpy error mode {np.geterr()}")
    if torch.get_default_dtype() != torch.float32:
        seen.append(f"torch default dtype {torch.get_default_dtype()}")
    if "ATTNBENCH_PROBE_LEAK" in os.environ:
        seen.append("environment variable ATTNBENCH_PROBE_LEAK")
    wanted = os.environ.get("PROBE_THREADS")
    if wanted and torch.get_num_threads() != int(wanted):
        seen.append(f"{torch.get_num_threads()} torch threads, not {wanted}")
    if seen:
        raise RuntimeError("another plugin's state: " + "; ".join(seen))
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    s = q @ np.swapaxes(k, -1, -2) * scale
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True) @ v).astype(q.dtype)
'''


def _plugins(tmp_path: Path) -> list[str]:
    (tmp_path / "badimport.py").write_text(BAD_IMPORT)
    (tmp_path / "observer.py").write_text(OBSERVER)
    return ["--plugin", str(tmp_path / "badimport.py"), "--plugin", str(tmp_path / "observer.py")]


def test_state_a_plugin_sets_at_import_reaches_no_other_implementation_in_verify(tmp_path: Path, attnbench) -> None:
    out = tmp_path / "v.json"
    code, _, err = attnbench.outcome("verify", *_plugins(tmp_path), "--only", "numpy_naive,observer", "--suite", "small",
                        "--trials", "1", "--json", str(out))
    bad = [(c["implementation"], c["check"], c["reason"]) for c in load_results(out)["cells"]
           if c["status"] not in ("pass", "skipped")]
    assert not bad, bad[:3]
    assert code == 0, err


def test_state_a_plugin_sets_at_import_reaches_no_other_implementation_in_bench(tmp_path: Path, attnbench) -> None:
    out = tmp_path / "b.json"
    code, _, err = attnbench.outcome("bench", *_plugins(tmp_path), "--only", "observer", "--T", "16", "--heads", "1", "--d", "8",
                        "--roof-budget", "0.01", "--budget", "0.01", "--min-samples", "2", "--no-memory", "--quiet", "--threads", "2",
                        "--out", str(out), env={"PROBE_THREADS": "2"})
    cells = load_results(out)["cells"]
    assert [(c["status"], c["reason"]) for c in cells] == [("ok", None)], err
    assert code == 0, err


def test_the_command_process_keeps_its_state_when_a_plugin_changes_it_at_import(tmp_path: Path) -> None:
    """The command itself (which starts every worker) loads all plugins: their state must not stick to it."""
    (tmp_path / "badimport.py").write_text(BAD_IMPORT)
    probe = (
        "import os, numpy as np, torch\n"
        "from harness.contract.discovery import load_registry\n"
        "before = (np.geterr(), torch.get_default_dtype(), torch.get_num_threads(), dict(os.environ))\n"
        f"registry = load_registry([{str(tmp_path / 'badimport.py')!r}])\n"
        "assert 'badimport' in registry, registry.errors\n"
        "after = (np.geterr(), torch.get_default_dtype(), torch.get_num_threads(), dict(os.environ))\n"
        "print([name for name, b, a in zip(('numpy', 'dtype', 'threads', 'environ'), before, after) if a != b])\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=BOUND_S)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("call", ["sys.exit(0)", "sys.exit('bye')", "raise SystemExit(3)"])
def test_a_plugin_that_exits_at_import_is_a_load_error_of_that_plugin(tmp_path: Path, call: str, attnbench) -> None:
    plugin = tmp_path / "quitter.py"
    plugin.write_text(f"import sys\n{call}\n")
    for args in (["list"], ["verify", "--only", "numpy_naive", "--suite", "small", "--json", str(tmp_path / "v.json")]):
        code, stdout, err = attnbench.outcome(*args, "--plugin", str(plugin))
        assert code == 2, (args, code, err)
        lines = [line for line in err.splitlines() if "error:" in line]
        assert len(lines) == 1 and "quitter.py" in lines[0] and "exit" in lines[0], err
        assert "Traceback" not in err


RAW_WRITER = '''
import os

import numpy as np

from harness import register

os.write(1, b"rawwriter: written to fd 1 at import\\n")


@register("rawwriter", backend="numpy")
def rawwriter(q, k, v, *, causal=False, mask=None, scale=None):
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    s = q @ np.swapaxes(k, -1, -2) * scale
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True) @ v).astype(q.dtype)
'''


def test_a_plugin_writing_to_fd_1_at_import_leaves_verify_json_on_stdout_intact(tmp_path: Path, attnbench) -> None:
    plugin = tmp_path / "rawwriter.py"
    plugin.write_text(RAW_WRITER)
    code, stdout, err = finish(attnbench.start("verify", "--plugin", str(plugin), "--only", "rawwriter", "--suite", "small",
                                         "--trials", "1", "--json", "-"))
    assert code == 0, err
    assert json.loads(stdout)["cells"], stdout[:200]
    assert "rawwriter: written to fd 1 at import" in err
