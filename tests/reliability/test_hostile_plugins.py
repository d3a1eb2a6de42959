"""What a plugin does with the command's processes and streams stays with its worker: closed standard streams,
``os._exit`` at import or in a call, reading the command's stdin, a message of many megabytes, a signal to the
command's process group. Each with a real command, a real plugin file and a real closed descriptor or signal.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.runtime import confinement

pytestmark = pytest.mark.slow  # subprocesses and workers that import torch: not in the inner loop

KERNEL = '''
import os, signal, sys
import numpy as np
from harness import register


def _attend(q, k, v, causal=False, mask=None, scale=None):
    s = q @ np.swapaxes(k, -1, -2) * (q.shape[-1] ** -0.5 if scale is None else scale)
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], dtype=bool)), s, -np.inf)
    if mask is not None:
        s = np.where(mask, s, -np.inf) if mask.dtype == bool else s + mask
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True) @ v).astype(q.dtype)


@register("honest", backend="numpy")
def honest(q, k, v, *, causal=False, mask=None, scale=None):
    return _attend(q, k, v, causal, mask, scale)


@register("exits_in_call", backend="numpy")
def exits_in_call(q, k, v, *, causal=False, mask=None, scale=None):
    os._exit(0)


@register("reads_stdin", backend="numpy")
def reads_stdin(q, k, v, *, causal=False, mask=None, scale=None):
    if os.read(0, 64):
        raise RuntimeError("read the command's stdin")
    return _attend(q, k, v, causal, mask, scale)


@register("shouts", backend="numpy")
def shouts(q, k, v, *, causal=False, mask=None, scale=None):
    raise RuntimeError("x" * 20_000_000)


def _command():
    """The worker's ancestors that run attnbench: its forkserver (a fork of the command) and the command."""
    found, pid = [], os.getppid()
    while pid > 1:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            if b"harness" not in f.read():
                break
        found.append(pid)
        with open(f"/proc/{pid}/stat") as f:
            pid = int(f.read().rsplit(")", 1)[1].split()[1])
    return found


def _tries(attack):  # a hostile plugin ignores what is refused and answers right
    def kernel(q, k, v, *, causal=False, mask=None, scale=None):
        for pid in _command():
            try:
                attack(pid)
            except OSError:
                pass
        return _attend(q, k, v, causal, mask, scale)
    return register(attack.__name__, backend="numpy")(kernel)


def terms_group(pid):  # SIGTERM to the command's process group
    os.killpg(os.getpgid(pid), signal.SIGTERM)


def kills_command(pid):
    os.kill(pid, signal.SIGKILL)


def sigio_command(pid):  # the kernel sends the signal later, when the pipe becomes readable
    import fcntl
    r, w = os.pipe()
    fcntl.fcntl(r, fcntl.F_SETOWN, pid)
    fcntl.fcntl(r, 10, signal.SIGKILL)  # F_SETSIG
    fcntl.fcntl(r, fcntl.F_SETFL, os.O_ASYNC)
    os.write(w, b"x")


def pidfd_command(pid):  # a /proc/PID directory is a pidfd
    fd = os.open(f"/proc/{pid}", os.O_RDONLY | os.O_DIRECTORY)
    signal.pidfd_send_signal(fd, signal.SIGKILL)


def traces_command(pid):
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.ptrace(0x4206, pid, None, None) == 0:  # PTRACE_SEIZE
        libc.ptrace(8, pid, None, None)  # PTRACE_KILL


for attack in (terms_group, kills_command, sigio_command, pidfd_command, traces_command):
    globals()[f"{attack.__name__}_kernel"] = _tries(attack)  # the registry reads a plugin's module globals
'''

EXITS_AT_IMPORT = '''
import os
from harness import register


@register("exits_at_import", backend="numpy")
def exits_at_import(q, k, v, *, causal=False, mask=None, scale=None):
    return q

os._exit(0)
'''

VERIFY = ["verify", "--suite", "small", "--trials", "1"]
BENCH = ["bench", "--T", "16", "--heads", "1", "--d", "8", "--roof-budget", "0.01", "--budget", "0.01", "--min-samples", "2", "--no-memory",
         "--quiet", "--threads", "1"]


def _plugin(tmp_path: Path, code: str = KERNEL, name: str = "hostile.py") -> Path:
    path = tmp_path / name
    path.write_text(code)
    return path


def _close(*fds: int):  # type: ignore[no-untyped-def]
    def close() -> None:
        for fd in fds:
            os.close(fd)
        os.setsid()  # a group of its own: a plugin's signal to the command's group never reaches this test
    return close


def test_verify_with_stdout_closed_runs_an_honest_kernel(tmp_path: Path, attnbench) -> None:
    out = tmp_path / "v.json"
    done = attnbench(*VERIFY, "--plugin", str(_plugin(tmp_path)), "--only", "honest", "--json", str(out),
                     preexec_fn=_close(1))
    assert done.returncode == 0, done.stderr[-3000:]
    cells = json.loads(out.read_text())["cells"]
    assert cells and {c["status"] for c in cells} == {"pass"}, {c["status"] for c in cells}


def test_verify_json_on_stdout_with_stderr_closed_stays_json(tmp_path: Path, attnbench) -> None:
    done = attnbench(*VERIFY, "--plugin", str(_plugin(tmp_path)), "--only", "honest", "--json", "-",
                     preexec_fn=_close(2))
    assert done.returncode == 0, done.stdout[-3000:]
    assert json.loads(done.stdout)["complete"]


def test_verify_with_every_standard_stream_closed_still_writes_its_result(tmp_path: Path, attnbench) -> None:
    out = tmp_path / "v.json"
    done = attnbench(*VERIFY, "--plugin", str(_plugin(tmp_path)), "--only", "honest", "--json", str(out),
                     preexec_fn=_close(0, 1, 2))
    assert done.returncode == 0
    assert {c["status"] for c in json.loads(out.read_text())["cells"]} == {"pass"}


def test_os_exit_at_import_is_a_load_error_never_a_green_exit(tmp_path: Path, attnbench) -> None:
    out = tmp_path / "v.json"
    done = attnbench(*VERIFY, "--plugin", str(_plugin(tmp_path, EXITS_AT_IMPORT)), "--only", "exits_at_import",
                     "--json", str(out))
    assert done.returncode == 2, (done.returncode, done.stderr[-3000:])
    assert "os._exit(0)" in done.stderr, done.stderr[-3000:]


def test_os_exit_in_a_call_is_a_crash_that_says_so(tmp_path: Path, attnbench) -> None:
    out = tmp_path / "v.json"
    done = attnbench(*VERIFY, "--plugin", str(_plugin(tmp_path)), "--only", "exits_in_call", "--json", str(out))
    assert done.returncode == 1, done.stderr[-3000:]
    cells = json.loads(out.read_text())["cells"]
    assert {c["status"] for c in cells} == {"crash"}
    assert all("exited with code 0" in c["reason"] and "before answering" in c["reason"] for c in cells), cells[0]


@pytest.mark.parametrize("where", ["import", "call"])
def test_os_exit_under_the_pytest_plugin_fails_the_session(tmp_path: Path, where: str) -> None:
    code = EXITS_AT_IMPORT if where == "import" else KERNEL
    name = "exits_at_import" if where == "import" else "exits_in_call"
    _plugin(tmp_path, code, "plugin.py")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "PYTHONPATH")}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                           "--attnbench-plugin", "plugin.py", "--attnbench-only", name, "--attnbench-suite", "small"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0, done.stdout[-3000:]
    assert "os._exit(0)" in done.stdout + done.stderr, (done.stdout[-3000:], done.stderr[-2000:])


def test_a_plugin_reads_nothing_of_the_command_stdin(tmp_path: Path, attnbench) -> None:
    out = tmp_path / "v.json"
    done = subprocess.run(attnbench.argv(*VERIFY, "--plugin", str(_plugin(tmp_path)), "--only", "reads_stdin",
                                         "--json", str(out)),
                          input="SECRET\n", capture_output=True, text=True, env=attnbench.env(), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert {c["status"] for c in json.loads(out.read_text())["cells"]} == {"pass"}


def test_a_plugin_message_of_megabytes_is_cut_in_the_worker(tmp_path: Path, attnbench) -> None:
    out = tmp_path / "v.json"
    done = attnbench(*VERIFY, "--plugin", str(_plugin(tmp_path)), "--only", "shouts", "--json", str(out))
    assert done.returncode == 1, done.stderr[-3000:]
    assert out.stat().st_size < 2_000_000, out.stat().st_size  # many cases, each a few KiB at most
    cells = json.loads(out.read_text())["cells"]
    assert {c["status"] for c in cells} == {"error"}
    reason = cells[0]["reason"]
    assert len(reason) < 20_000 and "bytes cut" in reason, reason[-300:]
    assert reason.startswith("RuntimeError: xxx") and "hostile.py" in reason[-300:]  # its head and its tail kept
    assert len(done.stderr) < 200_000


ATTACKS = ["terms_group", "kills_command", "sigio_command", "pidfd_command", "traces_command"]


CONFINED = pytest.mark.skipif(not sys.platform.startswith("linux") or confinement.unavailable() is not None,
                              reason=f"the seccomp filter and /proc are Linux's: {confinement.unavailable()}")


@pytest.fixture(scope="module")
def attacked(tmp_path_factory: pytest.TempPathFactory, attnbench) -> tuple[subprocess.CompletedProcess[str], dict]:
    """One verify run of every plugin of :data:`ATTACKS` (each in its worker, as always): a command that any one of
    them could stop would not end with exit 0 and a complete file. The process and its result file's document."""
    tmp = tmp_path_factory.mktemp("attacked")
    out = tmp / "r.json"
    done = attnbench(*VERIFY, "--json", str(out), "--plugin", str(_plugin(tmp)), "--only", ",".join(ATTACKS),
                     preexec_fn=_close())
    return done, json.loads(out.read_text()) if out.exists() else {}


@CONFINED
@pytest.mark.parametrize("attack", ATTACKS)
def test_a_plugin_cannot_signal_or_trace_the_command(attack: str, attacked) -> None:
    done, result = attacked
    assert done.returncode == 0, (done.returncode, done.stderr[-3000:])
    cells = [c for c in result["cells"] if c["implementation"] == attack]
    assert result["complete"] and cells and {c["status"] for c in cells} == {"pass"}, done.stderr[-3000:]


@CONFINED
def test_bench_survives_a_plugin_that_kills_the_command(tmp_path: Path, attnbench) -> None:
    out = tmp_path / "b.json"
    done = attnbench(*BENCH, "--out", str(out), "--plugin", str(_plugin(tmp_path)),
                     "--only", "kills_command,terms_group", preexec_fn=_close())
    assert done.returncode == 0, (done.returncode, done.stderr[-3000:])
    cells = json.loads(out.read_text())["cells"]
    assert cells and {c["status"] for c in cells} == {"ok"}, [(c["status"], c.get("reason")) for c in cells]


MODULES = '''
import numpy as np
from harness import register_module
from implementations.module_numpy_mha import numpy_multihead_attention


@register_module("nan_mha", backend="numpy", dtypes=("float32",), layers=("mha",))
def nan_mha(x, *, heads, weights, **kwargs):
    return np.full_like(numpy_multihead_attention(x, heads=heads, weights=weights, **kwargs), np.nan)


@register_module("short_mha", backend="numpy", dtypes=("float32",), layers=("mha",))
def short_mha(x, *, heads, weights, **kwargs):
    return numpy_multihead_attention(x, heads=heads, weights=weights, **kwargs)[:, :-1]
'''


@pytest.fixture(scope="module")
def benched_modules(tmp_path_factory: pytest.TempPathFactory,
                    attnbench) -> tuple[subprocess.CompletedProcess[str], dict]:
    """One bench run of both module plugins of :data:`MODULES`: the process and its result file's document."""
    tmp = tmp_path_factory.mktemp("modules")
    out = tmp / "b.json"
    done = attnbench(*BENCH, "--plugin", str(_plugin(tmp, MODULES, "modules.py")), "--only", "nan_mha,short_mha",
                     "--out", str(out))
    return done, json.loads(out.read_text()) if out.exists() else {}


@pytest.mark.parametrize(("name", "problem"), [("nan_mha", "NaN"), ("short_mha", "shape")])
def test_bench_checks_a_module_cell_output_as_a_kernel_cell(name: str, problem: str, benched_modules) -> None:
    done, result = benched_modules
    assert done.returncode == 1, done.stderr[-3000:]
    cells = [c for c in result["cells"] if c["implementation"] == name]
    assert cells and {c["status"] for c in cells} == {"wrong"}, [(c["status"], c.get("reason")) for c in cells]
    assert all(problem in c["reason"] for c in cells), cells[0]["reason"]


def test_an_ascii_only_output_encoding_gets_escapes_not_a_crash(tmp_path: Path, attnbench) -> None:
    out = tmp_path / "v.json"  # verify's table has a "worst ×base" column: what an ASCII stream cannot spell
    done = attnbench(*VERIFY, "--plugin", str(_plugin(tmp_path)), "--only", "honest", "--json", str(out),
                     env={"PYTHONIOENCODING": "ascii"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr and "\\xd7base" in done.stdout, done.stdout[-2000:]
    done.stdout.encode("ascii")


@pytest.mark.parametrize("json_to", ["-", "FILE"])
def test_model_list_as_json_goes_to_stdout_or_is_refused(tmp_path: Path, json_to: str, attnbench) -> None:
    target = "-" if json_to == "-" else str(tmp_path / "models.json")
    done = attnbench("verify", "--model", "list", "--json", target)
    if json_to == "-":
        assert done.returncode == 0 and json.loads(done.stdout)["models"]
    else:
        assert done.returncode == 2 and "--json -" in done.stderr and done.stdout == "", done
        assert not Path(target).exists()
