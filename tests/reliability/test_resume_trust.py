"""`bench --resume FILE`: a result file is data, never a command. It loads no plugin the command line did not
name, connects to no address it holds, brings no other machine's memory budget, and its settings are checked as
flags are (exit 2 naming the setting, never exit 3)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.cli import main
from harness.results import load_results

FAST = ["--roof-budget", "0.01", "--budget", "0.02", "--min-samples", "2", "--threads", "1", "--quiet", "--no-memory"]
PLUGIN = '''
import pathlib, torch
pathlib.Path({marker!r}).write_text("imported")
from harness import register


@register("marked", backend="torch")
def marked(q, k, v, *, causal=False, mask=None, scale=None):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
'''


@pytest.fixture(scope="module")
def done(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A finished one-cell bench file of a plugin that leaves a marker file when it is imported."""
    d = tmp_path_factory.mktemp("resume")
    plugin = d / "marked.py"
    plugin.write_text(PLUGIN.format(marker=str(d / "imported")))
    path = d / "run.json"
    assert main(["bench", "--plugin", str(plugin), "--only", "marked", "--T", "16", "--d", "8", "--heads", "1",
                 "--mode", "fwd", "--out", str(path), *FAST]) == 0
    (d / "imported").unlink()
    return {"document": load_results(path), "plugin": plugin, "marker": d / "imported"}


def _interrupted(done: dict[str, Any], tmp_path: Path, **config: Any) -> Path:
    document = json.loads(json.dumps(done["document"]))
    document.update(complete=False, cells=[])
    document["config"].update(config)
    path = tmp_path / "partial.json"
    path.write_text(json.dumps(document))
    return path


def test_a_resume_never_imports_a_plugin_the_command_line_did_not_name(done: dict[str, Any], tmp_path: Path, attnbench) -> None:
    path = _interrupted(done, tmp_path)
    proc = attnbench("bench", "--resume", str(path), "--quiet", timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert f"--plugin {done['plugin']}" in proc.stderr and "never loads code" in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not done["marker"].exists()  # not imported
    assert json.loads(path.read_text())["cells"] == []  # the file untouched


def test_another_plugin_is_refused_too(done: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                       ) -> None:
    other = tmp_path / "other.py"
    other.write_text("")
    path = _interrupted(done, tmp_path)
    assert main(["bench", "--resume", str(path), "--plugin", str(other), "--quiet"]) == 2
    assert f"given: {other}" in capsys.readouterr().err


def test_executor_address_and_memory_budget_come_from_this_machine(done: dict[str, Any], tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    # the file names a cluster (nothing listens there) and a budget no cell fits: neither is used
    path = _interrupted(done, tmp_path, executor="ray", address="127.0.0.1:9", memory_budget_bytes=1.0)
    code = main(["bench", "--resume", str(path), "--plugin", str(done["plugin"]), *FAST[:-2], "--json"])
    captured = capsys.readouterr()
    err = captured.err
    assert code == 0, err
    printed = json.loads(captured.out, parse_constant=lambda word: pytest.fail(f"bare {word}: not strict JSON"))
    assert printed["path"] == str(path) and printed["complete"]
    assert "was run with --executor ray --address 127.0.0.1:9; this resume runs locally" in err
    finished = load_results(path)
    assert finished["complete"] and [c["status"] for c in finished["cells"]] == ["ok"]
    assert "node" not in finished["cells"][0]  # measured here, not on a cluster


@pytest.mark.parametrize("setting, value, named", [
    ("timeout_s", -1, "config.timeout_s -1"),
    ("timeout_s", "300", "config.timeout_s: '300'"),
    ("threads", 0, "config.threads 0"),
    ("suite", "nope", "config.suite 'nope'"),
    ("timing", {"budget_s": 0.1, "turbo": True}, "unknown setting(s) turbo"),
    ("timing", {"budget_s": -1}, "config.timing.budget_s -1"),
    ("timing", {"min_samples": 1.5}, "config.timing.min_samples 1.5"),
    ("timing", {"clock": "sundial"}, "config.timing.clock 'sundial'"),
    ("timing", [1], "config.timing [1]"),
    ("overrides", {"T": ["x"]}, "config.overrides.T"),
    ("overrides", {"colour": [1]}, "config.overrides.colour"),
    ("only", "marked", "config.only: 'marked'"),
])
def test_stored_settings_are_checked_as_flags_are(done: dict[str, Any], tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str], setting: str, value: Any,
                                                  named: str) -> None:
    path = _interrupted(done, tmp_path, **{setting: value})
    code = main(["bench", "--resume", str(path), "--plugin", str(done["plugin"]), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert named in err and str(path) in err and "Traceback" not in err, err
