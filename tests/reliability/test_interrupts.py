"""Ctrl-C always stops, at any moment, with exit 130, one message, and every recorded result kept.

Each signal lands where the test wants it by construction: a gated plugin
(:mod:`gates`) stops mid-cell, mid-import or after the answer, and the test signals
the real ``attnbench`` process only once the plugin says it is there.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
from gates import finish, plugin_file, release, wait_started

from harness.results import load_results

pytestmark = pytest.mark.slow  # subprocesses and workers that import torch: not in the inner loop


def _interrupted_lines(err: str) -> int:
    return sum(": interrupted" in line for line in err.splitlines())


KERNEL = '''
import numpy as np
from harness import register


def _attend(q, k, v, causal=False, mask=None, scale=None):
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    s = q @ np.swapaxes(k, -1, -2) * scale
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True) @ v).astype(q.dtype)
'''

GATED_AT_T128 = KERNEL + '''

@register("gated", backend="numpy")
def gated(q, k, v, *, causal=False, mask=None, scale=None):
    if q.shape[-2] == 128:
        gate("cell")
    return _attend(q, k, v, causal, mask, scale)
'''

GATED_AT_CALL_60 = KERNEL + '''
calls = 0


@register("gated", backend="numpy")
def gated(q, k, v, *, causal=False, mask=None, scale=None):
    global calls
    calls += 1
    if calls == 60:  # a few cases before this one are checked and recorded
        gate("cell")
    return _attend(q, k, v, causal, mask, scale)
'''

BENCH = ["bench", "--only", "gated", "--T", "64", "128", "--heads", "1", "--d", "16", "--roof-budget", "0.01", "--budget", "0.01",
         "--min-samples", "2", "--no-memory", "--quiet", "--threads", "1"]


def test_ctrl_c_mid_cell_stops_bench_with_130_once_and_resume_finishes(tmp_path: Path, attnbench) -> None:
    plugin = plugin_file(tmp_path, GATED_AT_T128)
    out = tmp_path / "run.json"
    proc = attnbench.start(*BENCH, "--plugin", str(plugin), "--out", str(out))
    wait_started(tmp_path, "cell", proc)  # the T=64 cell is recorded; T=128 is running
    proc.send_signal(signal.SIGINT)
    code, stdout, err = finish(proc)
    assert code == 130, err
    assert _interrupted_lines(err) == 1 and "Traceback" not in err
    assert f"attnbench bench --resume {out} --plugin {plugin}" in err  # the file never loads code by itself
    data = load_results(out)
    assert not data["complete"] and [c["case"]["tq"] for c in data["cells"]] == [64]

    release(tmp_path, "cell")
    code, _, err = finish(attnbench.start("bench", "--resume", str(out), "--plugin", str(plugin), "--quiet"))
    assert code == 0, err
    finished = load_results(out)
    assert finished["complete"] and [c["case"]["tq"] for c in finished["cells"]] == [64, 128]
    assert finished["cells"][0]["samples_s"] == data["cells"][0]["samples_s"]  # kept, not measured again


def test_ctrl_c_stops_run_at_once_and_says_how_to_finish(tmp_path: Path, attnbench) -> None:
    plugin = plugin_file(tmp_path, GATED_AT_CALL_60)
    proc = attnbench.start("run", "--plugin", str(plugin), "--only", "gated", "--results-dir", str(tmp_path / "results"),
                     "--reports-dir", str(tmp_path / "reports"))
    wait_started(tmp_path, "cell", proc)  # verify is checking a case
    proc.send_signal(signal.SIGINT)
    code, _, err = finish(proc)
    assert code == 130, err
    assert "attnbench run: interrupted" in err and "Traceback" not in err
    assert "attnbench run: bench" not in err, "run went on to the next step after Ctrl-C"
    assert not (tmp_path / "reports").exists()
    verify_files = list((tmp_path / "results").glob("*-verify.json"))
    assert len(verify_files) == 1 and not load_results(verify_files[0])["complete"]
    assert f"result files so far: {verify_files[0]}" in err
    assert "to finish: attnbench verify" in err and "attnbench bench --suite quick" in err
    release(tmp_path, "cell")


def test_ctrl_c_during_a_plugin_import_exits_130_without_a_traceback(tmp_path: Path, attnbench) -> None:
    plugin = plugin_file(tmp_path, 'gate("import")\n' + GATED_AT_T128)
    proc = attnbench.start("verify", "--plugin", str(plugin), "--only", "gated", "--json", str(tmp_path / "v.json"))
    wait_started(tmp_path, "import", proc)
    proc.send_signal(signal.SIGINT)
    code, _, err = finish(proc)
    assert code == 130, err
    assert "Traceback" not in err and _interrupted_lines(err) == 1


SWALLOWS = '''
try:  # what torch's C++ start-up does to a KeyboardInterrupt raised while it imports NumPy
    gate("import")
except KeyboardInterrupt:
    pass
'''


def test_a_ctrl_c_that_library_code_swallows_still_stops_the_command(tmp_path: Path, attnbench) -> None:
    plugin = plugin_file(tmp_path, SWALLOWS + GATED_AT_T128)
    out = tmp_path / "v.json"
    proc = attnbench.start("verify", "--plugin", str(plugin), "--only", "gated", "--json", str(out))
    wait_started(tmp_path, "import", proc)
    proc.send_signal(signal.SIGINT)  # raised inside the plugin's import, and swallowed there
    release(tmp_path, "import")
    code, stdout, err = finish(proc)
    assert code == 130, err
    assert "checks in" not in stdout and not out.exists(), "verify ran although Ctrl-C was pressed"


def test_verify_interrupted_says_where_the_partial_file_is(tmp_path: Path, attnbench) -> None:
    plugin = plugin_file(tmp_path, GATED_AT_CALL_60)
    out = tmp_path / "v.json"
    proc = attnbench.start("verify", "--plugin", str(plugin), "--only", "gated", "--suite", "small", "--json", str(out))
    wait_started(tmp_path, "cell", proc)
    proc.send_signal(signal.SIGINT)
    code, _, err = finish(proc)
    release(tmp_path, "cell")
    assert code == 130, err
    assert _interrupted_lines(err) == 1 and f"are in {out} (complete: false)" in err
    data = load_results(out)
    assert not data["complete"] and data["cells"], "checks recorded before Ctrl-C were lost"
    assert all(c["status"] != "crash" for c in data["cells"]), "the worker killed by Ctrl-C was recorded as a crash"


AFTER_ANSWER = GATED_AT_T128.replace('if q.shape[-2] == 128:\n        gate("cell")\n', "") + '''
import atexit

atexit.register(gate, "exit")  # runs after attnbench printed its answer, while the interpreter exits
'''


def test_ctrl_c_after_the_answer_is_printed_exits_130_not_a_signal_death(tmp_path: Path, attnbench) -> None:
    plugin = plugin_file(tmp_path, AFTER_ANSWER)
    proc = attnbench.start("list", "--plugin", str(plugin), "--json")
    wait_started(tmp_path, "exit", proc)
    proc.send_signal(signal.SIGINT)
    code, stdout, err = finish(proc)
    release(tmp_path, "exit")
    assert code == 130, err
    assert "Traceback" not in err
    assert any(entry["name"] == "gated" for entry in json.loads(stdout)["implementations"])  # the answer was complete
